"""`pytest --attention-kernel=package.module:function`: every checker case a test of its own.

Registered under pytest's `pytest11` entry points, so pytest loads it in every session once
scratch is installed: at load it imports nothing but pytest and scratch (standard library
only), and it does nothing unless --attention-kernel is given. Then each case of the chosen
check, in each dtype and seed, is an item `attention::forward[causal-square-float32-seed0]`
run by the checker's one runner (doors.Plan.run_one); a failure shows the checker's report of
the case with its diagnosis and worst element, a declined case is skipped with the kernel's
reason, and the summary gives the checker's verdict over the cases that ran (a check no case
of which passed fails the session, as `python -m scratch.check` exits 1).

Defaults are the checker's own (`python -m scratch.check`), so each item is a row of its
report: seed 0, dtype float32 (whose standard cases include a float64 one), array numpy,
the standard cases.
"""

from __future__ import annotations

import sys

import pytest

PLANS = pytest.StashKey[dict]()  # (kind, dtype, seed) -> Plan, in the order of the items
RESULTS = pytest.StashKey[dict]()  # (kind, dtype, seed) -> the results of the cases that ran


def pytest_addoption(parser: pytest.Parser) -> None:
    """The --attention-* options."""
    group = parser.getgroup("attention", "attention kernel checks (scratch.testing)")
    group.addoption(
        "--attention-kernel",
        metavar="MODULE:FUNCTION",
        default=None,
        help="check this attention kernel: each checker case becomes a test",
    )
    group.addoption(
        "--attention-cases",
        default="standard",
        metavar="SET",
        help="standard (default), full or large (4096 tokens) forward cases",
    )
    group.addoption(
        "--attention-variants",
        action="store_true",
        help="the variant cases (window, softcap, ALiBi, sinks, documents, RoPE, ...)",
    )
    group.addoption(
        "--attention-backward",
        action="store_true",
        help="the kernel is a backward (with --attention-array torch and no --attention-"
        "variants: a forward differentiated by torch.autograd)",
    )
    group.addoption("--attention-seeds", default="0", metavar="0,1,...", help="seeds (default 0)")
    group.addoption(
        "--attention-dtypes",
        default="float32",
        metavar="float32,...",
        help="dtypes (default float32): float32, float64, float16, bfloat16",
    )
    group.addoption("--attention-array", default="numpy", help="numpy (default), torch or list")
    group.addoption("--attention-device", default=None, help="torch device, e.g. cuda")
    group.addoption(
        "--attention-require",
        default="",
        metavar="FEATURES",
        help="features the kernel may not decline, comma-separated (e.g. mask,causal)",
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    """What is checked, under pytest's header."""
    target = config.getoption("attention_kernel")
    if target is None:
        return None
    o = config.getoption
    return (
        f"attention kernel: {target} ({kind_option(config)}, cases {o('attention_cases')}, "
        f"dtypes {o('attention_dtypes')}, seeds {o('attention_seeds')}, array "
        f"{o('attention_array')})"
    )


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list
) -> None:
    """A test per case of each (dtype, seed), after the session's own tests."""
    if config.getoption("attention_kernel") is None:
        return
    plans = make_plans(config)
    config.stash[PLANS], config.stash[RESULTS] = plans, {key: [] for key in plans}
    checks = AttentionChecks.from_parent(session, name="attention", nodeid="attention")
    found = checks.collect()
    # told like any collector's items, so "collected N items" counts them
    session.ihook.pytest_collectreport(
        report=pytest.CollectReport("attention", "passed", None, found)
    )
    items.extend(found)


def kind_option(config: pytest.Config) -> str:
    """The kind of case the options ask for (scratch.testing.assertions.kind_of)."""
    from scratch.testing.assertions import kind_of

    return kind_of(config.getoption("attention_variants"), config.getoption("attention_backward"))


def make_plans(config: pytest.Config) -> dict:
    """(kind, dtype, seed) -> the check's Plan; pytest.UsageError for a bad option or kernel."""
    from scratch.checker.cli import load
    from scratch.testing.assertions import DOORS

    o = config.getoption
    here = str(config.invocation_params.dir)
    if here not in sys.path:  # like `python -m pytest`: the kernel's module may be right here
        sys.path.insert(0, here)
    kind = kind_option(config)
    settings = {"array": o("attention_array"), "device": o("attention_device"),
                "require": o("attention_require")}  # fmt: skip
    if kind == "forward":
        settings["cases"] = o("attention_cases")
    elif o("attention_cases") != "standard":
        raise pytest.UsageError(f"--attention-cases: {kind} checks have the standard cases only")
    plans = {}
    try:
        kernel = load(o("attention_kernel"))
        for dtype in words(o("attention_dtypes"), "--attention-dtypes"):
            for seed in seeds(o("attention_seeds")):
                plan = DOORS[kind].plan(kernel, dtype=dtype, seed=seed, **settings)
                plans[kind, plan.kind.dtype, seed] = plan
    except (ValueError, TypeError, ImportError) as exc:
        raise pytest.UsageError(f"attention check: {exc}") from None  # exc names the setting
    return plans


def words(text: str, option: str) -> list[str]:
    """'float32, float64' -> ['float32', 'float64']; UsageError when empty."""
    found = [w.strip() for w in text.split(",") if w.strip()]
    if not found:
        raise pytest.UsageError(f"{option}: expected comma-separated values, found {text!r}")
    return found


def seeds(text: str) -> list[int]:
    """'0,1,2' -> [0, 1, 2]; UsageError for anything but ints."""
    found = words(text, "--attention-seeds")
    if not all(w.lstrip("-").isdigit() for w in found):
        raise pytest.UsageError(f"--attention-seeds: expected comma-separated ints, found {text!r}")
    return [int(w) for w in found]


class AttentionChecks(pytest.Collector):
    """The checker's cases for the kernel: one item per case, dtype and seed."""

    def collect(self) -> list[AttentionItem]:
        """The items, in the order of the checker's report, dtype by dtype, seed by seed."""
        from scratch.testing.assertions import case_kind

        # named by the kind of case: a forward check of FlashAttention's own interface runs
        # the variant cases
        return [
            AttentionItem.from_parent(
                self,
                name=f"{case_kind(case)}[{case.name}-{key[1]}-seed{key[2]}]",
                key=key,
                case=case,
            )
            for key, plan in self.config.stash[PLANS].items()
            for case in plan.cases
        ]


class AttentionItem(pytest.Item):
    """One checker case run by the one runner; a failure shows the checker's report of it."""

    def __init__(self, *, key: tuple, case: object, **kwargs) -> None:
        super().__init__(**kwargs)
        self.key, self.case = key, case

    def runtest(self) -> None:
        """Pass, fail with the case's report (AttentionMismatch), or skip a declined case."""
        from scratch.testing.assertions import outcome

        report = self.config.stash[PLANS][self.key].run_one(self.case)
        self.config.stash[RESULTS][self.key].append(report.cases[0])
        result = outcome(report, self.case, self.key[2])
        if result.status == "unsupported":
            pytest.skip(f"declined: {result.message}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo, style=None) -> str:
        """The checker's report of the case, without the runner's traceback."""
        from scratch.testing.assertions import AttentionMismatch

        if isinstance(excinfo.value, AttentionMismatch):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple:
        """Where pytest says the test is."""
        return self.path, None, f"attention {self.name}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A check that fails by the checker's verdict fails the session (every case declined
    passes pytest: no item failed)."""
    if any(not report for report in reports(session.config)):
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The checker's verdict and diagnosis for each dtype and seed over the cases that ran."""
    for report in reports(config):
        terminalreporter.write_line(f"attention check ({report.settings}): {report.verdict}")
        if report.diagnosis:
            terminalreporter.write_line(f"  diagnosis: {report.diagnosis}")


def reports(config: pytest.Config) -> list:
    """A CheckReport per (kind, dtype, seed) of the cases that ran, weighed across cases as
    scratch.check weighs them (run.finish)."""
    from scratch.checker.report import CheckReport
    from scratch.checker.run import finish

    plans, results = config.stash.get(PLANS, {}), config.stash.get(RESULTS, {})
    return [
        finish(CheckReport(plans[key].target, plans[key].settings, list(ran)), plans[key].required)
        for key, ran in results.items()
        if ran
    ]
