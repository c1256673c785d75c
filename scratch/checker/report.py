"""The checker's results: one CaseResult per case, and the CheckReport that prints as a table."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scratch.bounds.tolerance import RuleResult
from scratch.checker.cases import FEATURES
from scratch.checker.variant_cases import VARIANT_FEATURES


@dataclass
class CaseResult:
    """The outcome of one case: status is 'pass', 'fail' or 'unsupported'.

    Attributes:
        name: the case's name.
        shapes: q, k, v shapes in words.
        options: the keywords fn got, in words.
        dtype: the dtype checked.
        status: "pass", "fail" or "unsupported" (fn declined the case).
        max_error: the largest |output - truth|.
        bound: the bound at the max error (pass) or at the worst ratio (fail).
        ratio: max error / bound over elements (<= 1 passes).
        rule: the second rule's result (fn's error vs a correct kernel's in its dtype), or None.
        message: the verdict in words.
        diagnosis: the mistake a failure looks like, or None.
        features: the optional features the case uses (keys of FEATURES).
        raised: the type of what fn raised (a refusal or a crash), if it did.
        trace: the last lines of fn's own code in that exception's traceback.
        diff: |output - truth| per element (..., R, Ev), for the window's heatmap.
    """

    name: str
    shapes: str
    options: str
    dtype: str
    status: str
    max_error: float = math.nan
    bound: float = math.nan  # the bound at the max error (pass) or at the worst ratio (fail)
    ratio: float = math.nan  # max error/bound over elements (<= 1 passes)
    rule: RuleResult | None = None
    message: str = ""
    diagnosis: str | None = None
    features: tuple[str, ...] = ()  # the optional features the case uses (keys of FEATURES)
    raised: str | None = None  # the type of what fn raised (a refusal or a crash), if it did
    trace: tuple[str, ...] = ()  # the last lines of fn's own code in that exception's traceback
    diff: list | None = field(
        default=None, repr=False
    )  # |output - truth| per element (..., R, Ev), for the window's heatmap

    @property
    def ok(self) -> bool:
        """Pass or unsupported (an unsupported feature is not a wrong answer)."""
        return self.status != "fail"


@dataclass
class CheckReport:
    """All case results; truthy when no case fails and one passes. str() is a readable table.

    Attributes:
        target: the checked function's name (module:function).
        settings: the check's settings in one line.
        cases: one CaseResult per case.
        diagnosis: the mistake the failures look like, or None.
        notes: what this check cannot show (e.g. under Triton's CPU interpreter).
    """

    target: str
    settings: str
    cases: list[CaseResult] = field(default_factory=list)
    diagnosis: str | None = None
    notes: list[str] = field(default_factory=list)  # what this check cannot show (interpreter.py)

    def __bool__(self) -> bool:
        return all(c.ok for c in self.cases) and any(c.status == "pass" for c in self.cases)

    @property
    def failed(self) -> list[CaseResult]:
        """The failing cases."""
        return [c for c in self.cases if c.status == "fail"]

    @property
    def unsupported_features(self) -> list[str]:
        """The features no case ran (every case using them declined), in words (masks, GQA)."""
        handled = {f for c in self.cases if c.status != "unsupported" for f in c.features}
        seen: list[str] = []
        for c in self.cases:
            if c.status == "unsupported":
                for f in c.features:
                    word = FEATURES.get(f) or VARIANT_FEATURES.get(f, f)
                    if f not in handled and word not in seen:
                        seen.append(word)
        return seen

    @property
    def declined_cases(self) -> list[str]:
        """The unsupported cases each of whose features ran in another case (combinations)."""
        handled = {f for c in self.cases if c.status != "unsupported" for f in c.features}
        return [
            c.name
            for c in self.cases
            if c.status == "unsupported" and c.features and set(c.features) <= handled
        ]

    @property
    def verdict(self) -> str:
        """What was verified, in one line: 'PASS on 5 of 13 cases; masks, causal unsupported'."""
        n = len(self.cases)
        passed = sum(c.status == "pass" for c in self.cases)
        failed = len(self.failed)
        head = f"PASS on {passed} of {n} cases" if self else f"FAIL: {failed} of {n} cases fail"
        if not self and failed == 0:
            head = f"FAIL: no case passed ({n} cases)"
        missing = self.unsupported_features
        head += f"; {', '.join(missing)} unsupported" if missing else ""
        more = self.declined_cases
        if more:
            head += f"; {len(more)} more case{'s' * (len(more) > 1)} not run ({', '.join(more)})"
        return head

    def __str__(self) -> str:
        head = (
            "case",
            "dtype",
            "shapes q / k / v",
            "options",
            "max error",
            "bound",
            "err/bound",
            "rule",
            "verdict",
        )
        rows = [head]
        for c in self.cases:
            rule = c.rule.allowed if c.rule is not None else math.nan
            verdict = {"pass": "pass", "fail": "FAIL", "unsupported": "unsupported"}[c.status]
            rows.append(
                (
                    c.name,
                    c.dtype,
                    c.shapes,
                    c.options,
                    num(c.max_error),
                    num(c.bound),
                    ratio_text(c.ratio),
                    num(rule),
                    verdict,
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [f"check {self.target}  ({self.settings})"]
        for n, r in enumerate(rows):
            lines.append("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip())
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        counts = {
            s: sum(c.status == s for c in self.cases) for s in ("pass", "fail", "unsupported")
        }
        lines.append("")
        lines.append(
            f"{len(self.cases)} cases: {counts['pass']} pass, {counts['fail']} fail, "
            f"{counts['unsupported']} unsupported -> {self.verdict}"
        )
        for c in self.cases:
            if c.message:
                lines.append(f"  {c.name}: {c.message}")
            if c.status == "fail":
                lines.extend(f"      at {frame}" for frame in c.trace)
        if any(c.raised and c.status == "fail" for c in self.cases):
            lines.append(
                "  (a raise fails its case; a kernel declines a feature by raising "
                "NotImplementedError)"
            )
        if self.diagnosis:
            lines.append(f"diagnosis: {self.diagnosis}")
        elif self.failed and all(c.raised for c in self.failed):
            lines.append("diagnosis: none (every failing case raised: see its exception above)")
        elif not self:
            lines.append("diagnosis: no known mistake matches")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines).rstrip() + "\n"


def num(x: float) -> str:
    """A number for the table."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2e}"


def ratio_text(x: float) -> str:
    """error/bound for the table (<= 1 is within the bound)."""
    return "-" if math.isnan(x) else ("inf" if math.isinf(x) else f"{x:.3g}")


def shape_text(*shapes: tuple[int, ...]) -> str:
    """(5, 8) (7, 8) (7, 4) -> '5x8 / 7x8 / 7x4'."""
    return " / ".join("x".join(map(str, s)) for s in shapes)
