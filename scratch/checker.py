"""Point the checker at your own attention kernel: seeded cases, error bounds, a diagnosis.

    report = scratch.check(my_attention, array="torch", dtype="float16")
    print(report)            # one row per case: shapes, options, max error, bound, verdict
    report.diagnosis         # e.g. "missing scale: scores not multiplied by 1/sqrt(d)"

`fn(q, k, v, attn_mask=..., is_causal=..., scale=..., enable_gqa=...)` gets only the keywords a
case needs and returns the output or (output, weights). Each output is compared with the float64
ground truth computed on the same rounded inputs: it must lie within `tolerance` (a rounding
error bound) AND within FlashAttention's rule (at most 2x the error of a plain softmax(QK^T)V in
the same dtype, plus a few ulps). When a case fails, deliberately wrong variants of the ground
truth name the likely mistake. `python -m scratch.check package.module:function` runs it.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import math
import random
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import product

from .tolerance import UNIT_ROUNDOFF, RuleResult, check_dtype, reference_error_rule, tolerance
from .validate import as_tensor

ARRAYS = ("numpy", "torch", "list")
CASE_SETS = ("standard", "full")


# ---------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    """One seeded test input: shapes, the keywords fn gets, and which features it needs."""

    name: str
    q: tuple[int, ...]
    k: tuple[int, ...]
    v: tuple[int, ...]
    mask: str = "none"  # "none" | "bool" | "float" | "empty-row" (bool with a fully masked row)
    is_causal: bool = False
    scale: float | None = None
    gqa: bool = False
    dtype: str | None = None  # None: the dtype the checker was asked for
    q_size: float = 1.0  # spread of q; large values make exp overflow without max subtraction

    def features(self, dtype: str) -> tuple[str, ...]:
        """Optional features: fn may refuse a case that uses one (see `_settle_refusals`)."""
        found = []
        if len(self.q) > 2:
            found.append("leading dims")
        if self.mask != "none":
            found.append("attn_mask")
        if self.is_causal:
            found.append("is_causal")
        if self.scale is not None:
            found.append("scale")
        if self.gqa:
            found.append("enable_gqa")
        if self.dtype is not None and self.dtype != dtype:
            found.append(self.dtype)
        return tuple(found)

    def options(self) -> str:
        """The case's options in words, for the report."""
        words = []
        if self.mask != "none":
            words.append(
                {"empty-row": "bool mask, a fully masked row"}.get(self.mask, f"{self.mask} mask")
            )
        if self.is_causal:
            words.append("is_causal")
        if self.scale is not None:
            words.append(f"scale={self.scale:g}")
        if self.gqa:
            words.append("enable_gqa")
        if self.q_size != 1.0:
            words.append(f"large logits (std {self.q_size:g})")  # q.k/sqrt(E) ~ N(0, q_size^2)
        return ", ".join(words) or "-"


def standard_cases(dtype: str) -> list[Case]:
    """Cases chosen so that every mistake the diagnosis knows changes at least one of them."""
    big = 1000.0 if dtype == "float64" else 100.0  # float64 exp overflows only past 709
    cases = [
        Case("plain", (5, 8), (7, 8), (7, 4)),
        Case("square", (4, 6), (6, 6), (6, 5)),  # E == S: q @ k without .T would run
        Case("batch-heads", (2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5)),
        Case("bool-mask", (5, 8), (7, 8), (7, 4), mask="bool"),
        Case("float-mask", (5, 8), (7, 8), (7, 4), mask="float"),
        Case("causal-square", (6, 8), (6, 8), (6, 4), is_causal=True),  # L == S
        Case("causal-wide", (4, 8), (7, 8), (7, 4), is_causal=True),  # L < S
        Case("causal-tall", (7, 8), (4, 8), (4, 4), is_causal=True),  # L > S
        Case("custom-scale", (5, 8), (7, 8), (7, 4), scale=0.3),
        Case("gqa", (1, 4, 5, 8), (1, 2, 7, 8), (1, 2, 7, 4), gqa=True),
        Case("masked-row", (5, 8), (7, 8), (7, 4), mask="empty-row"),
        Case("large-logits", (5, 8), (7, 8), (7, 4), q_size=big),
    ]
    for other in ("float32", "float64"):
        if other != dtype:
            cases.append(Case(other, (5, 8), (7, 8), (7, 4), dtype=other))
    return cases


def full_cases(dtype: str) -> list[Case]:
    """The standard cases plus more sizes."""
    return standard_cases(dtype) + [
        Case("tiny", (1, 1), (1, 1), (1, 1)),
        Case("one-key", (6, 4), (1, 4), (1, 3)),
        Case("medium", (48, 32), (48, 32), (48, 32)),
        Case("long-keys", (3, 16), (300, 16), (300, 8)),
        Case("wide-head", (8, 128), (8, 128), (8, 64)),
        Case("batch-causal", (2, 2, 24, 16), (2, 2, 24, 16), (2, 2, 24, 16), is_causal=True),
        Case("gqa-mask", (2, 6, 9, 8), (2, 2, 11, 8), (2, 2, 11, 8), mask="bool", gqa=True),
    ]


# ---------------------------------------------------------------- inputs in the caller's arrays


def _gauss(rng: random.Random, shape: tuple[int, ...], size: float = 1.0) -> list:
    """Nested lists of N(0, size^2) floats."""
    if len(shape) == 1:
        return [rng.gauss(0.0, size) for _ in range(shape[0])]
    return [_gauss(rng, shape[1:], size) for _ in range(shape[0])]


def _mask_values(rng: random.Random, case: Case, L: int, S: int) -> list | None:
    """The case's (L, S) mask: bools with >= 1 True per row, or floats with some -inf."""
    if case.mask in ("bool", "empty-row"):
        rows = [[rng.random() < 0.6 for _ in range(S)] for _ in range(L)]
        for i, row in enumerate(rows):
            row[rng.randrange(S)] = True
            if case.mask == "empty-row" and i == 1:
                row[:] = [False] * S
        return rows
    if case.mask == "float":
        rows = [
            [rng.uniform(-3.0, 1.0) if rng.random() < 0.75 else -math.inf for _ in range(S)]
            for _ in range(L)
        ]
        for row in rows:
            j = rng.randrange(S)
            row[j] = rng.uniform(-3.0, 1.0)
        return rows
    return None


def _round_float(x: float, dtype: str) -> float:
    """A Python float rounded to `dtype` (round to nearest even), for array='list'."""
    if dtype == "float64" or not math.isfinite(x):
        return x
    if dtype == "float32":
        return struct.unpack("f", struct.pack("f", x))[0]
    if dtype == "float16":
        return struct.unpack("e", struct.pack("e", x))[0]
    bits = struct.unpack("I", struct.pack("f", x))[0]  # bfloat16: keep the top 16 float32 bits
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("f", struct.pack("I", bits))[0]


def _map(f: Callable, nested: object) -> object:
    """f applied to every leaf of nested lists."""
    if isinstance(nested, list):
        return [_map(f, x) for x in nested]
    return f(nested)


class _Arrays:
    """Makes the caller's arrays (numpy, torch or lists) and reads results back as floats."""

    def __init__(self, array: str, device: object):
        self.array, self.device = array, device
        if array == "numpy":
            import numpy

            self.np = numpy
        elif array == "torch":
            import torch

            self.torch = torch

    def make(self, data: list, dtype: str) -> object:
        """Data (nested lists of floats or bools) as the caller's array type in `dtype`."""
        is_bool = isinstance(_first(data), bool)
        if self.array == "list":
            return data if is_bool else _map(lambda x: _round_float(x, dtype), data)
        if self.array == "numpy":
            if dtype == "bfloat16":
                raise ValueError("dtype: numpy has no bfloat16; use array='torch' for bfloat16")
            return self.np.asarray(data, dtype=bool if is_bool else dtype)
        kind = self.torch.bool if is_bool else getattr(self.torch, dtype)
        return self.torch.tensor(data, dtype=kind, device=self.device)

    def floats(self, x: object) -> list:
        """An array's values as nested lists of Python floats."""
        if hasattr(x, "detach"):
            x = x.detach().to("cpu").double()
        return _map(float, x.tolist() if hasattr(x, "tolist") else x)


def _first(nested: object) -> object:
    """The first leaf of nested lists."""
    while isinstance(nested, (list, tuple)):
        nested = nested[0]
    return nested


# ---------------------------------------------------------------- results


@dataclass
class CaseResult:
    """The outcome of one case: status is 'pass', 'fail' or 'unsupported'."""

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
    features: tuple[str, ...] = ()  # the optional features the case uses
    raised: type[BaseException] | None = None  # what fn raised (a refusal or a crash), if it did

    @property
    def ok(self) -> bool:
        """Pass or unsupported (an unsupported feature is not a wrong answer)."""
        return self.status != "fail"


@dataclass
class CheckReport:
    """All case results; truthy when no case fails. str() is a readable table."""

    target: str
    settings: str
    cases: list[CaseResult] = field(default_factory=list)
    diagnosis: str | None = None

    def __bool__(self) -> bool:
        return all(c.ok for c in self.cases) and any(c.status == "pass" for c in self.cases)

    @property
    def failed(self) -> list[CaseResult]:
        """The failing cases."""
        return [c for c in self.cases if c.status == "fail"]

    def __str__(self) -> str:
        head = (
            "case",
            "dtype",
            "shapes q / k / v",
            "options",
            "max error",
            "bound",
            "err/bound",
            "2x plain",
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
                    _num(c.max_error),
                    _num(c.bound),
                    _ratio(c.ratio),
                    _num(rule),
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
            f"{counts['unsupported']} unsupported -> {'PASS' if self else 'FAIL'}"
        )
        for c in self.cases:
            if c.message:
                lines.append(f"  {c.name}: {c.message}")
        lines.append(
            f"diagnosis: {self.diagnosis}"
            if self.diagnosis
            else ("diagnosis: no known mistake matches" if not self else "")
        )
        return "\n".join(lines).rstrip() + "\n"


def _num(x: float) -> str:
    """A number for the table."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2e}"


def _ratio(x: float) -> str:
    """error/bound for the table (<= 1 is within the bound)."""
    return "-" if math.isnan(x) else ("inf" if math.isinf(x) else f"{x:.3g}")


def _shape_text(*shapes: tuple[int, ...]) -> str:
    """(5, 8) (7, 8) (7, 4) -> '5x8 / 7x8 / 7x4'."""
    return " / ".join("x".join(map(str, s)) for s in shapes)


# ---------------------------------------------------------------- the check


def check(
    fn: Callable,
    *,
    array: str = "numpy",
    dtype: object = "float32",
    device: object = None,
    cases: str = "standard",
    seed: int = 0,
    masked_rows: str = "zero",
    progress: Callable[[int, int, str], None] | None = None,
) -> CheckReport:
    """Run fn on seeded cases and compare each output with the ground truth; see the module doc."""
    from .validate import check_masked_rows

    if not callable(fn):
        raise TypeError(f"fn: expected a callable attention function, found {type(fn).__name__}")
    if array not in ARRAYS:
        raise ValueError(f"array: expected one of {', '.join(ARRAYS)}, found {array!r}")
    if cases not in CASE_SETS:
        raise ValueError(f"cases: expected 'standard' or 'full', found {cases!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, found {type(seed).__name__} {seed!r}")
    if device is not None and array != "torch":
        raise ValueError(f"device: only meaningful with array='torch', found array={array!r}")
    dtype = check_dtype(dtype)
    masked_rows = check_masked_rows(masked_rows)
    if dtype == "bfloat16" and array == "numpy":
        raise ValueError("dtype: numpy has no bfloat16; use array='torch' for bfloat16")
    arrays = _Arrays(array, device)
    if array == "torch":
        try:
            arrays.torch.zeros(1, device=device)
        except Exception as exc:
            raise ValueError(f"device: torch cannot use device {device!r} ({exc})") from exc
    todo = standard_cases(dtype) if cases == "standard" else full_cases(dtype)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    module = getattr(fn, "__module__", None)
    target = f"{module}:{name}" if module else name
    settings = (
        f"array={array}, dtype={dtype}, device={device or 'default'}, cases={cases}, "
        f"seed={seed}, masked_rows={masked_rows}"
    )
    report = CheckReport(target, settings)
    accepts = _accepted_keywords(fn)
    for n, case in enumerate(todo):
        if progress is not None:
            progress(n + 1, len(todo), case.name)
        report.cases.append(_run_case(fn, case, arrays, dtype, seed, masked_rows, accepts))
    _settle_refusals(report.cases)
    found = [c.diagnosis for c in report.failed if c.diagnosis]
    if found:  # the most frequent diagnosis first
        ranked = sorted(set(found), key=lambda d: (-found.count(d), found.index(d)))
        report.diagnosis = "; ".join(ranked)
    return report


def _settle_refusals(results: list[CaseResult]) -> None:
    """A raise counts as 'unsupported' only when fn never handled those features elsewhere.

    NotImplementedError is always a refusal. Any other exception in a case whose features
    another case used without fn raising (causal with L > S crashing while causal with L == S
    ran, say) is a bug in a supported feature, so the case fails.
    """
    for r in results:
        if r.status != "unsupported" or r.raised is None:
            continue
        if issubclass(r.raised, NotImplementedError):  # said plainly: a refusal
            continue
        ran = next(
            (
                o
                for o in results
                if o.features
                and o.raised is None
                and set(r.features) <= set(o.features)
                and o.status != "unsupported"
            ),
            None,
        )
        if ran is not None:
            r.status = "fail"
            r.message += f"; yet fn handled {', '.join(r.features)} in case {ran.name}"


def _read_output(out: object) -> tuple[list, tuple[int, ...]]:
    """fn's output (array, tensor or nested lists) as nested floats and its shape."""
    try:
        return as_tensor(out, "output")
    except (TypeError, ValueError) as exc:
        raise _BadResult(f"fn's result is not an array of numbers: {exc}") from None


def _accepted_keywords(fn: Callable) -> set[str] | None:
    """The keyword names fn accepts, or None when it takes **kwargs or has no signature."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


@dataclass
class _Inputs:
    """One case's inputs: float64 lists (rounded to the dtype) and the caller's arrays."""

    q: list
    k: list
    v: list
    mask: list | None
    args: tuple
    kwargs: dict


def _make_inputs(case: Case, arrays: _Arrays, dtype: str, seed: int) -> _Inputs:
    """Seeded inputs for a case, made in the caller's array type, then read back as floats."""
    rng = random.Random(f"{seed}:{case.name}")
    q = _gauss(rng, case.q, case.q_size)
    k, v = _gauss(rng, case.k), _gauss(rng, case.v)
    mask = _mask_values(rng, case, case.q[-2], case.k[-2])
    made = [arrays.make(x, dtype) for x in (q, k, v)]
    rounded = [arrays.floats(x) for x in made]
    kwargs = {}
    if mask is not None:
        kwargs["attn_mask"] = arrays.make(mask, dtype)
        if case.mask == "float":
            mask = arrays.floats(kwargs["attn_mask"])
    if case.is_causal:
        kwargs["is_causal"] = True
    if case.scale is not None:
        kwargs["scale"] = case.scale
    if case.gqa:
        kwargs["enable_gqa"] = True
    return _Inputs(*rounded, mask, tuple(made), kwargs)


def _truth(x: _Inputs, case: Case, policy: str, **change) -> tuple[list, list]:
    """The ground truth (output, weights) for a case, optionally with arguments changed."""
    from . import scaled_dot_product_attention

    kwargs = {
        "attn_mask": x.mask,
        "is_causal": case.is_causal,
        "scale": case.scale,
        "enable_gqa": case.gqa,
        "masked_rows": policy,
    }
    kwargs.update(change)
    return scaled_dot_product_attention(x.q, x.k, x.v, **kwargs)


def _call(fn: Callable, x: _Inputs) -> tuple[object, object]:
    """fn on the case's arrays: (output, weights or None)."""
    result = fn(*x.args, **x.kwargs)
    if isinstance(result, tuple):
        if len(result) != 2:
            raise _BadResult(
                f"fn returned a tuple of {len(result)} items; expected output or (output, weights)"
            )
        return result[0], result[1]
    return result, None


class _BadResult(Exception):
    """fn returned something that is not an output."""


def _run_case(
    fn,
    case: Case,
    arrays: _Arrays,
    dtype: str,
    seed: int,
    masked_rows: str,
    accepts: set[str] | None,
) -> CaseResult:
    """Run one case: call fn, compare with the ground truth, diagnose a failure."""
    cdtype = case.dtype or dtype
    L, Ev = case.q[-2], case.v[-1]
    expected = case.q[:-2] + (L, Ev)
    result = CaseResult(
        case.name, _shape_text(case.q, case.k, case.v), case.options(), cdtype, "fail"
    )
    features = result.features = case.features(dtype)
    if accepts is not None and case.gqa and "enable_gqa" not in accepts:
        result.status, result.message = "unsupported", "fn takes no enable_gqa keyword"
        return result
    try:
        x = _make_inputs(case, arrays, cdtype, seed)
    except (ValueError, TypeError) as exc:  # e.g. float64 on a device without it
        result.status, result.message = "unsupported", f"cannot make {cdtype} inputs: {exc}"
        return result
    try:
        out, weights = _call(fn, x)
    except _BadResult as exc:
        result.message = str(exc)
        return result
    except Exception as exc:  # the kernel's own error: unsupported feature, or a failure
        words = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
        result.raised = type(exc)
        if features:  # settled once every case has run: `_settle_refusals`
            result.status = "unsupported"
            result.message = f"raised {words} (uses {', '.join(features)})"
        else:
            result.message = f"raised {words}"
        return result
    try:
        got, found = _read_output(out)
    except _BadResult as exc:  # None, a string, ragged lists...: a wrong answer, not a refusal
        result.message = str(exc)
        return result
    if found != expected:
        result.message = f"output shape {found}, expected {expected} (..., L, Ev)"
        result.diagnosis = _diagnose_shape(case, found)
        return result
    truth, p = _truth(x, case, masked_rows)
    bound = tolerance_for(case, x, p, cdtype)
    result.max_error, result.ratio, result.bound = _worst(got, truth, bound)
    plain = _plain_in_dtype(x, case, cdtype, arrays, truth, p)
    if plain is not None:
        result.rule = reference_error_rule(got, plain, truth, dtype=cdtype)
    within = result.ratio <= 1.0
    if within and (result.rule is None or result.rule.ok):
        result.status = "pass"
        return result
    if not within:
        result.message = (
            f"max error {result.max_error:.3g} is {result.ratio:.3g}x the bound "
            f"at the worst element"
        )
    else:
        r = result.rule
        result.message = (
            f"within the bound, but error {r.error:.3g} > 2x the plain "
            f"{cdtype} kernel's error {r.reference_error:.3g} + floor "
            f"(allowed {r.allowed:.3g})"
        )
    result.diagnosis = _diagnose(fn, case, x, got, weights, truth, p, cdtype, masked_rows)
    if result.diagnosis is None and cdtype in ("float16", "bfloat16") and result.rule is not None:
        if result.rule.ok:  # as accurate as the plain 16-bit kernel, but not float32-accumulated
            result.diagnosis = (
                f"scores or sums kept in {cdtype}: as accurate as a plain {cdtype} kernel, but "
                f"the bound assumes float32 accumulation (as PyTorch's kernels do)"
            )
    return result


def _shape(nested: object) -> tuple[int, ...]:
    """Shape of nested lists (a scalar has shape ())."""
    dims = []
    while isinstance(nested, list):
        dims.append(len(nested))
        nested = nested[0] if nested else None
    return tuple(dims)


def _flat(nested: object) -> list:
    """Leaves of nested lists in row-major order."""
    level = [nested]
    while level and isinstance(level[0], list):
        level = [y for row in level for y in row]
    return level


def _worst(got: list, want: list, bound: list) -> tuple[float, float, float]:
    """(max |got - want|, max |got - want| / bound, the bound to show).

    NaN must match NaN; an exact-zero bound needs an exact match. The bound shown is the one at
    the largest error when every element passes, else the one at the worst ratio, so "max
    error vs bound" in the table always reads like the verdict."""
    worst_err, worst_ratio, at_err, at_ratio = 0.0, 0.0, 0.0, 0.0
    for g, w, b in zip(_flat(got), _flat(want), _flat(bound), strict=True):
        if math.isnan(g) or math.isnan(w):
            err = 0.0 if math.isnan(g) and math.isnan(w) else math.inf
        else:
            err = 0.0 if g == w else abs(g - w)
            err = math.inf if math.isnan(err) else err
        ratio = 0.0 if err == 0 else (err / b if b > 0 else math.inf)
        if err > worst_err or (err == worst_err and at_err == 0.0):
            worst_err, at_err = err, b
        if ratio > worst_ratio:
            worst_ratio, at_ratio = ratio, b
    return worst_err, worst_ratio, at_ratio if worst_ratio > 1.0 else at_err


# ---------------------------------------------------------------- the plain kernel in the dtype


def _plain_in_dtype(
    x: _Inputs, case: Case, dtype: str, arrays: _Arrays, truth: list, p: list
) -> list | None:
    """softmax(q @ k^T * scale + mask) @ v computed naively in `dtype` (numpy, else torch)."""
    use_torch = arrays.array == "torch" or dtype == "bfloat16"
    try:
        if use_torch:
            import torch

            out = _plain_torch(torch, x, case, dtype)
        else:
            import numpy

            out = _plain_numpy(numpy, x, case, dtype)
    except ImportError:
        return None
    # fully masked rows follow the masked_rows policy exactly: take the truth's rows there
    for index in product(*map(range, case.q[:-2])):
        o, t, w = _at(out, index), _at(truth, index), _at(p, index)
        for i, row in enumerate(w):
            if not any(a > 0 for a in row):
                o[i] = list(t[i])
    return out


def _at(nested: list, index: tuple[int, ...]) -> list:
    """nested[i0][i1]... for a tuple of leading indices."""
    for i in index:
        nested = nested[i]
    return nested


def _plain_numpy(np, x: _Inputs, case: Case, dtype: str) -> list:
    """The plain kernel in numpy."""
    q, k, v = (np.asarray(a, dtype=dtype) for a in (x.q, x.k, x.v))
    if case.gqa:
        group = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    scale = case.scale if case.scale is not None else 1.0 / math.sqrt(q.shape[-1])
    L, S = q.shape[-2], k.shape[-2]
    with np.errstate(all="ignore"):
        scaled = (q @ np.swapaxes(k, -1, -2)) * np.asarray(scale, dtype=dtype)  # (L,E)@(E,S)
        if case.is_causal:
            scaled = np.where(np.tril(np.ones((L, S), dtype=bool)), scaled, -np.inf)
        elif case.mask == "float":
            scaled = scaled + np.asarray(x.mask, dtype=dtype)
        elif x.mask is not None:
            scaled = np.where(np.asarray(x.mask, dtype=bool), scaled, -np.inf)
        e = np.exp(scaled - np.max(scaled, axis=-1, keepdims=True))
        weights = (e / np.sum(e, axis=-1, keepdims=True)).astype(dtype)
        return (weights @ v).astype(np.float64).tolist()  # (L, S) @ (S, Ev) -> (L, Ev)


def _plain_torch(torch, x: _Inputs, case: Case, dtype: str) -> list:
    """The plain kernel in torch (CPU), for bfloat16 and torch arrays."""
    kind = getattr(torch, dtype)
    q, k, v = (torch.tensor(a, dtype=kind) for a in (x.q, x.k, x.v))
    if case.gqa:
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scale = case.scale if case.scale is not None else 1.0 / math.sqrt(q.shape[-1])
    L, S = q.shape[-2], k.shape[-2]
    scaled = (q @ k.transpose(-1, -2)) * scale  # (L, E) @ (E, S) -> (L, S)
    if case.is_causal:
        scaled = scaled.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    elif case.mask == "float":
        scaled = scaled + torch.tensor(x.mask, dtype=kind)
    elif x.mask is not None:
        scaled = scaled.masked_fill(~torch.tensor(x.mask, dtype=torch.bool), -math.inf)
    weights = torch.softmax(scaled, dim=-1)
    return (weights @ v).double().tolist()  # (L, S) @ (S, Ev) -> (L, Ev)


# ---------------------------------------------------------------- diagnosis


def _diagnose_shape(case: Case, found: tuple[int, ...]) -> str | None:
    """Name a mistake from a wrong output shape."""
    L, S, Ev = case.q[-2], case.k[-2], case.v[-1]
    if found[-2:] == (S, Ev) and L != S:
        return "softmax over the wrong axis (queries instead of keys): output has S rows"
    if found[-2:] == (L, S) and S != Ev:
        return "returned the weights instead of the output (weights @ v missing)"
    return None


def _variants(case: Case, x: _Inputs, masked_rows: str) -> list[tuple[str, Callable]]:
    """(mistake, () -> (output, weights)) for every mistake this case can reveal."""
    E, L, S = case.q[-1], case.q[-2], case.k[-2]
    d_scale = case.scale if case.scale is not None else 1.0 / math.sqrt(E)

    def truth(**change):
        return lambda: _truth(x, case, masked_rows, **change)

    def blocks(**how):
        return lambda: _by_blocks(x, case, d_scale, masked_rows, **how)

    found = [
        ("missing scale: scores not multiplied by 1/sqrt(d)", truth(scale=1.0)),
        ("scale 1/d instead of 1/sqrt(d)", truth(scale=1.0 / E)),
        ("softmax over the wrong axis (over queries, not keys)", blocks(axis="queries")),
    ]
    if case.scale is not None:
        found.append(("the scale argument is ignored (1/sqrt(d) used)", truth(scale=None)))
    if E == S:
        found.append(
            ("q @ k without the transpose (q @ k instead of q @ k^T)", blocks(transpose=False))
        )
    if case.mask in ("bool", "empty-row"):
        inverted = [[not a for a in row] for row in x.mask]
        found.append(("mask convention inverted (True taken as masked)", truth(attn_mask=inverted)))
    if case.mask == "float":
        found.append(
            ("mask added before scaling ((scores + mask) * scale)", blocks(mask_first=True))
        )
    if case.is_causal:
        from . import causal_mask

        off = [[j < i for j in range(S)] for i in range(L)]
        found.append(
            (
                "causal mask off by one (diagonal excluded: j < i)",
                truth(is_causal=False, attn_mask=off),
            )
        )
        found.append(
            (
                "causal mask inverted (attends to later keys: j >= i)",
                truth(is_causal=False, attn_mask=[[j >= i for j in range(S)] for i in range(L)]),
            )
        )
        if L != S:
            found.append(
                (
                    "bottom-right causal alignment instead of top-left (PyTorch's)",
                    truth(is_causal=False, attn_mask=causal_mask(L, S, "bottom-right")),
                )
            )
    if case.gqa:
        found.append(
            (
                "grouped-query heads mapped as h % Hkv instead of h // (Hq / Hkv)",
                blocks(interleave=True),
            )
        )
    for policy in ("zero", "nan", "uniform"):
        if policy != masked_rows and case.mask == "empty-row":
            found.append(
                (
                    f"fully masked rows give masked_rows={policy!r} results, not {masked_rows!r}",
                    truth(masked_rows=policy),
                )
            )
    return found


def _by_blocks(
    x: _Inputs,
    case: Case,
    scale: float,
    masked_rows: str,
    *,
    axis: str = "keys",
    transpose: bool = True,
    mask_first: bool = False,
    interleave: bool = False,
):
    """A deliberately varied attention in float64, built from the ground truth's pieces."""
    from . import causal_mask, matmul, softmax
    from . import transpose as t

    lead = case.q[:-2]
    L, S = case.q[-2], case.k[-2]
    outs, weights = [], []
    for index in product(*map(range, lead)):
        kv = index
        if case.gqa:
            Hq, Hkv = case.q[-3], case.k[-3]
            h = index[-1]
            kv = index[:-1] + ((h % Hkv) if interleave else (h // (Hq // Hkv)),)
        q, k, v = _at(x.q, index), _at(x.k, kv), _at(x.v, kv)
        # step 1: scores = q @ k^T   (L, E) @ (E, S) -> (L, S)   (or q @ k when E == S)
        scores = matmul(q, t(k) if transpose else k)
        # step 2: mask (a float mask may be added before the scale) and scale
        allowed = (
            causal_mask(L, S)
            if case.is_causal
            else (x.mask if x.mask is not None and case.mask != "float" else None)
        )
        add = x.mask if case.mask == "float" else None
        rows = []
        for i, row in enumerate(scores):
            if add is not None:
                row = [
                    (s + a) * scale if mask_first else s * scale + a for s, a in zip(row, add[i])
                ]
            else:
                row = [s * scale for s in row]
            if allowed is not None:
                row = [s if ok else -math.inf for s, ok in zip(row, allowed[i])]
            rows.append(row)
        # step 3: softmax along keys (or, wrongly, along queries)
        if axis == "keys":
            w = softmax(rows, masked_rows)
        else:
            w = t(softmax(t(rows), masked_rows))
        # step 4: output = weights @ v   (L, S) @ (S, Ev) -> (L, Ev)
        outs.append(matmul(w, v))
        weights.append(w)
    if not lead:
        return outs[0], weights[0]
    return _nest(outs, lead), _nest(weights, lead)


def _nest(blocks: list, lead: tuple[int, ...]) -> list:
    """Nest a row-major list of blocks into the leading dims."""
    for size in reversed(lead[1:]):
        blocks = [blocks[i : i + size] for i in range(0, len(blocks), size)]
    return blocks


def _matches(
    got: list, variant: tuple[list, list], x: _Inputs, case: Case, dtype: str, truth: list
) -> float:
    """How well fn's output matches a variant: max error / the variant's bound (<= 2 matches)."""
    out, w = variant
    if _shape(out) != _shape(got):
        return math.inf
    try:
        bound = tolerance_for(case, x, _map(lambda a: 0.0 if math.isnan(a) else a, w), dtype)
    except (ValueError, TypeError):
        return math.inf
    worst = 0.0
    for g, o, t, b in zip(_flat(got), _flat(out), _flat(truth), _flat(bound), strict=True):
        if math.isnan(o) or math.isnan(g):
            if math.isnan(o) != math.isnan(g):
                return math.inf
            continue
        # rows the variant leaves empty may follow another policy: compare the rest
        err = abs(g - o)
        allowed = max(b, 1e-3 * abs(o - t))  # variant and truth must be told apart
        if err:
            worst = max(worst, err / allowed if allowed > 0 else math.inf)
    return worst


def _diagnose(
    fn,
    case: Case,
    x: _Inputs,
    got: list,
    weights: object,
    truth: list,
    p: list,
    dtype: str,
    masked_rows: str,
) -> str | None:
    """Name the mistake: the variant of the ground truth that fn's output matches."""
    if any(math.isinf(a) or math.isnan(a) for a in _flat(got)) and case.q_size != 1.0:
        if all(math.isfinite(a) for a in _flat(truth)):
            return "exp overflows on large logits: subtract the row max before exp"
    best, best_score = None, math.inf
    for name, make in _variants(case, x, masked_rows):
        try:
            variant = make()
        except (ValueError, TypeError):
            continue
        if _distance(variant[0], truth) == 0.0:
            continue  # this case cannot reveal this mistake
        score = _matches(got, variant, x, case, dtype, truth)
        if score < best_score:
            best, best_score = name, score
    if best is not None and best_score <= 2.0:
        return best
    found = _dropout_signs(fn, x, got, weights, p)
    if found is None and dtype in ("float32", "float64"):
        if _worst(got, truth, tolerance_for(case, x, p, dtype))[1] > 1.0:
            found = _low_precision(case, x, got, truth, p, dtype)
    return found


def tolerance_for(case: Case, x: _Inputs, p: list, dtype: str) -> list:
    """The case's per-element bound in `dtype` given the truth's weights p."""
    float_mask = x.mask if case.mask == "float" else None
    return tolerance(
        x.q, x.k, x.v, p, scale=case.scale, dtype=dtype, attn_mask=float_mask, enable_gqa=case.gqa
    )


def _low_precision(
    case: Case, x: _Inputs, got: list, truth: list, p: list, dtype: str
) -> str | None:
    """A kernel that computes in a narrower dtype than it was given: fits that dtype's bound."""
    for narrow in ("float32", "float16", "bfloat16"):
        if UNIT_ROUNDOFF[narrow] <= UNIT_ROUNDOFF[dtype]:
            continue
        if _worst(got, truth, tolerance_for(case, x, p, narrow))[1] <= 1.0:
            return (
                f"lower precision: the error fits a {narrow} computation "
                f"(an intermediate cast to {narrow}?)"
            )
    return None


def _distance(a: list, b: list) -> float:
    """max |a - b|; NaN against NaN is 0, NaN against a number is inf."""
    worst = 0.0
    for x, y in zip(_flat(a), _flat(b), strict=True):
        if math.isnan(x) or math.isnan(y):
            worst = max(worst, 0.0 if math.isnan(x) and math.isnan(y) else math.inf)
        elif x != y:
            worst = max(worst, abs(x - y))
    return worst


def _dropout_signs(fn, x: _Inputs, got: list, weights: object, p: list) -> str | None:
    """Dropout left on: a second identical call differs, or weights are p zeroed or rescaled."""
    try:
        again = _read_output(_call(fn, x)[0])[0]
    except Exception:
        again = got
    if _distance(again, got) > 0.0:
        return "dropout left on (the output changes between two identical calls)"
    if weights is None:
        return None
    try:
        w, shape = _read_output(weights)
    except _BadResult:
        return None
    if shape != _shape(p):
        return None
    ratios = [a / b for a, b in zip(_flat(w), _flat(p)) if b > 1e-6 and a != 0.0]
    zeros = sum(1 for a, b in zip(_flat(w), _flat(p)) if b > 1e-6 and a == 0.0)
    if zeros and ratios and max(ratios) - min(ratios) < 1e-2 * max(ratios) and min(ratios) > 1.0:
        return (
            f"dropout left on (weights zeroed or rescaled by {ratios[0]:.3g} = "
            f"1/(1-{1 - 1 / ratios[0]:.2g}))"
        )
    return None


# ---------------------------------------------------------------- command line


def _load(target: str) -> Callable:
    """'package.module:function' (or module:Class.method) -> the function; ValueError if not."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"function: expected 'package.module:function', found {target!r}")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"function: cannot import module {module_name!r} ({exc})") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"function: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"function: {target!r} is a {type(obj).__name__}, not a function")
    return obj


def main(argv: list[str] | None = None) -> int:
    """`python -m scratch.check module:function [options]`: 0 pass, 1 fail, 2 bad arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m scratch.check",
        description="Check an attention function against the float64 ground truth.",
    )
    parser.add_argument("function", help="the function to check, as package.module:function")
    parser.add_argument("--array", choices=ARRAYS, default="numpy")
    parser.add_argument(
        "--dtype", default="float32", help="float32 (default), float64, float16 or bfloat16"
    )
    parser.add_argument("--device", default=None, help="torch device, e.g. cuda")
    parser.add_argument("--cases", choices=CASE_SETS, default="standard")
    parser.add_argument("--masked-rows", choices=("zero", "nan", "uniform"), default="zero")
    parser.add_argument("--seed", type=int, default=0)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad arguments, 0 on --help
        return int(exc.code or 0)
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: modules in the current folder can be found

    def progress(n: int, total: int, name: str) -> None:
        end = "\n" if n == total else ""
        print(f"\rchecking case {n}/{total}: {name:<16}", end=end, file=sys.stderr, flush=True)

    try:
        fn = _load(args.function)
        report = check(
            fn,
            array=args.array,
            dtype=args.dtype,
            device=args.device,
            cases=args.cases,
            seed=args.seed,
            masked_rows=args.masked_rows,
            progress=progress,
        )
    except (ValueError, TypeError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report, end="")
    return 0 if report else 1


__all__ = ["CaseResult", "CheckReport", "check", "main", "standard_cases", "full_cases"]
