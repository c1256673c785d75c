"""The pytest plugin (`pytest --attention-kernel=module:function`), run in separate pytest
processes (pytester) on a correct and a wrong kernel written here; its report read back.

The docs' plugin output (docs/check/pytest-plugin.md) is this file's
`test_a_planted_mistake_fails_its_cases_with_the_diagnosis` run: its lines are checked here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy  # noqa: F401 (here before pytester's inline runs: they restore sys.modules after)
import pytest

from scratch.checker.cases import backward_cases, full_cases, standard_cases
from scratch.checker.variant_cases import variant_cases

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "check" / "pytest-plugin.md"  # the plugin's section of the docs
PLUGIN = "scratch.testing.plugin"
# the venv's other pytest plugins, left out of the separate runs: loading them (PyQt6,
# hypothesis, anyio) took 7 of a trivial run's 9 s here
OTHERS = (
    "-p",
    "no:pytest-qt",
    "-p",
    "no:hypothesispytest",
    "-p",
    "no:anyio",
    "-p",
    "no:cacheprovider",
)
KERNELS = '''
import math

import numpy as np


def attention(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """softmax(q @ k^T * scale + mask) @ v, in q's dtype."""
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if enable_gqa and k.shape[-3] != q.shape[-3]:  # kv head h // group serves query head h
        group = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * q.dtype.type(scale)  # (..., L, E) @ (..., E, S)
    if is_causal:
        attn_mask = np.tril(np.ones((L, S), dtype=bool), k=DIAGONAL)
    if attn_mask is not None and attn_mask.dtype == bool:
        scores = np.where(attn_mask, scores, -np.inf)
    elif attn_mask is not None:
        scores = scores + attn_mask
    top = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(top), top, 0))
    total = weights.sum(axis=-1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    return weights @ v
'''


def write_kernels(pytester: pytest.Pytester) -> None:
    """right.py (correct) and wrong.py (the causal mask off by one: the diagonal excluded)."""
    pytester.makepyfile(
        right=KERNELS.replace("DIAGONAL", "0"), wrong=KERNELS.replace("DIAGONAL", "-1")
    )
    pytester.makepyfile(test_own="def test_own():\n    assert 1 + 1 == 2\n")


@pytest.fixture
def plugin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The subprocess imports this checkout's scratch."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def entry_point() -> tuple[str, str]:
    """pyproject's pytest11 entry point: (name, module)."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    ((name, module),) = table["project"]["entry-points"]["pytest11"].items()
    return name, module


def test_the_entry_point_names_the_plugin_module_under_its_own_name():
    """Named as the module, so `-p scratch.testing.plugin` with the entry point installed finds
    it registered (another name would register the module twice: pluggy's ValueError)."""
    assert entry_point() == (PLUGIN, PLUGIN)


def test_loading_the_plugin_imports_no_numpy_torch_or_hypothesis():
    code = (
        "import sys, scratch.testing.plugin\n"
        "print(sorted(m for m in ('numpy', 'torch', 'hypothesis') if m in sys.modules))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_without_the_option_the_plugin_adds_nothing(pytester: pytest.Pytester):
    pytester.makepyfile(test_own="def test_own():\n    assert True\n")
    result = pytester.runpytest("-p", PLUGIN)
    result.assert_outcomes(passed=1)
    # the header (platform, rootdir, plugins: names the installed scratch-attention, paths
    # that may hold any word) is pytest's; from "collected" on no line may mention attention:
    # no items, no summary, no verdict
    lines = result.stdout.lines
    start = next(i for i, ln in enumerate(lines) if ln.startswith("collected "))
    assert not [ln for ln in lines[start:] if "attention" in ln], lines


def test_a_bad_kernel_or_option_is_a_usage_error(pytester: pytest.Pytester):
    """In this process (pytester's inline run): a kernel module importing numpy here would be
    imported twice, as pytester restores sys.modules after each run."""
    pytester.makepyfile(stub="def attention(q, k, v):\n    return q\n")
    for args, said in [
        (["--attention-kernel=nowhere:fn"], "cannot import module 'nowhere'"),
        (["--attention-kernel=stub:attention", "--attention-array=jax"], "array: expected"),
        (["--attention-kernel=stub:attention", "--attention-seeds=a"], "--attention-seeds"),
        (["--attention-kernel=stub:attention", "--attention-dtypes=int8"], "dtype"),
        (["--attention-kernel=stub:attention", "--attention-cases=all"], "cases: expected"),
    ]:
        result = pytester.runpytest("-p", PLUGIN, *args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, args
        assert said in result.stderr.str(), args


DECLINES = """
def attention(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
              sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, attention_chunk=None,
              rotary_cos=None, rotary_sin=None, rotary_interleaved=False, enable_gqa=False):
    raise NotImplementedError("no variants here")
"""


def test_each_kind_of_check_collects_its_cases(pytester: pytest.Pytester):
    pytester.makepyfile(declines=DECLINES)
    kernel = "--attention-kernel=declines:attention"
    for args, kind, cases in [
        (["--attention-cases=full"], "forward", full_cases("float32")),
        (
            ["--attention-backward", "--attention-dtypes=float64"],
            "backward",
            backward_cases("float64"),
        ),
        (["--attention-variants"], "variants", variant_cases("float32")),
        (
            ["--attention-variants", "--attention-backward"],
            "variants-backward",
            variant_cases("float32"),
        ),
    ]:
        result = pytester.runpytest("-p", PLUGIN, kernel, "--collect-only", "-q", *args)
        dtype = "float64" if "--attention-dtypes=float64" in args else "float32"
        want = [f"attention::{kind}[{c.name}-{dtype}-seed0]" for c in cases]
        assert [x for x in result.stdout.lines if x.startswith("attention::")] == want, kind


def test_declined_cases_are_skipped_and_a_check_with_no_pass_fails(pytester: pytest.Pytester):
    """Every variant case declined (NotImplementedError): all skipped with the kernel's reason,
    and the session fails, as the checker's verdict does ("no case passed")."""
    pytester.makepyfile(declines=DECLINES)
    result = pytester.runpytest(
        "-p", PLUGIN, "--attention-kernel=declines:attention", "--attention-variants", "-rs",
        "-k", "window",
    )  # fmt: skip
    result.assert_outcomes(skipped=sum("window" in c.name for c in variant_cases("float32")))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "declined: raised NotImplementedError: no variants here" in out
    assert "FAIL: no case passed" in out


def test_the_entry_point_loads_the_plugin_and_a_correct_kernel_passes(
    pytester: pytest.Pytester, plugin_env: None
):
    """No -p: pytest loads the plugin from the pytest11 entry point (a distribution made here
    of pyproject's table). Every case of seeds 0 and 1 is a test with its case's name; -k
    selects by it (the 131- and 257-key cases left out: the run's slowest)."""
    name, module = entry_point()
    info = pytester.path / "scratch_plugin_check-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: scratch-plugin-check\nVersion: 0\n"
    )
    (info / "entry_points.txt").write_text(f"[pytest11]\n{name} = {module}\n")
    write_kernels(pytester)
    result = pytester.runpytest_subprocess(
        "-v", *OTHERS, "--attention-kernel=right:attention",
        "--attention-seeds=0,1", "-k", "not 131 and not 257",
    )  # fmt: skip
    every = [c.name for c in standard_cases("float32")]
    names = [n for n in every if "131" not in n and "257" not in n]
    result.assert_outcomes(passed=2 * len(names) + 1, deselected=2 * (len(every) - len(names)))
    lines = result.stdout.lines
    for seed in (0, 1):
        for case in names:
            item = f"attention::forward[{case}-float32-seed{seed}] PASSED"
            assert any(item in line for line in lines), item
    assert "attention kernel: right:attention (forward, cases standard" in result.stdout.str()
    assert any(
        re.search(rf"seed=1, masked_rows=zero\): PASS on {len(names)} of {len(names)} cases", x)
        for x in lines
    )


def readme_excerpt() -> list[str]:
    """The lines of the docs' plugin run (the ```text block after its pytest command)."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("# The checker inside your own pytest")
    block = re.search(r"```text\n(.*?)```", text[start:], re.DOTALL)
    assert block is not None, "no ```text block in docs/check/pytest-plugin.md"
    lines = block.group(1).splitlines()
    # the command, the elisions and the rulers' width (the terminal's) are not the output's
    return [x.strip("_ ") for x in lines if x.strip() not in ("", "...") and x[:2] != "$ "]


def test_a_planted_mistake_fails_its_cases_with_the_diagnosis(
    pytester: pytest.Pytester, plugin_env: None
):
    """The causal mask off by one fails exactly the causal cases, each with the diagnosis and
    its worst element; the rest pass, and the session's own test runs beside them."""
    write_kernels(pytester)
    result = pytester.runpytest_subprocess(
        "-p", PLUGIN, *OTHERS, "--attention-kernel=wrong:attention"
    )
    cases = standard_cases("float32")
    causal = [c.name for c in cases if c.is_causal]
    result.assert_outcomes(failed=len(causal), passed=len(cases) - len(causal) + 1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    failed = re.findall(r"^FAILED attention::forward\[(.+)-float32-seed0\]", out, re.M)
    assert failed == causal
    for name in causal:
        assert (
            f"\n{name} (float32, seed 0): causal mask off by one (diagonal excluded: j < i)\n"
            in out
        )
    # once per failure in the report; the short summary repeats it where pytest sees CI set
    # (pytest 8 leaves that summary untruncated there), so count before the summary
    report = out.split("short test summary info")[0]
    assert report.count("\nworst element: output[") == len(causal)
    for line in readme_excerpt():  # the docs show this run
        assert line in out, f"docs line not in the run's output: {line!r}"
