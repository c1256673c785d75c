"""The window's row-sampled check at large sizes, and the vectorized may-attend grid."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import scratch
from gui.state import controller, sampled_check
from gui.state.session import MAX_TOKENS, random_session
from scratch.backends import numpy_backend as nb
from tests.journey_sessions import with_mask

L_SAMPLED = sampled_check.SAMPLE_FROM_TOKENS + 20  # just past the size where sampling starts
SAMPLED_STEPS = [
    f"head_outputs ({sampled_check.SAMPLE_ROWS} sampled rows)",
    f"weights ({sampled_check.SAMPLE_ROWS} sampled rows)",
]  # the sampled check's two steps, in order (no mask)
MASKED_STEPS = [
    f"{n} ({sampled_check.SAMPLE_ROWS} sampled rows)"
    for n in ("scores", "scaled", "masked", "weights", "head_outputs", "output")
]  # with a mask (a variant: causal, drawn, ...) every step of the rows is checked


def _session(seed, mask_mode="none", grid=None, **changes):
    s = random_session(seed, num_tokens=L_SAMPLED, num_heads=2, num_kv_heads=changes.pop("kv", 2))
    s = with_mask(s, mask_mode, grid)
    return dataclasses.replace(s, backend="numpy", dtype="float32", **changes)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"mask_mode": "causal-top-left"},
        {"mask_mode": "causal-bottom-right", "masked_rows": "nan"},
        {"kv": 1, "masked_rows": "uniform"},
    ],
    ids=["plain", "causal", "bottom-right-nan", "gqa-uniform"],
)
def test_a_correct_backend_passes_the_sampled_check(seed, changes):
    """NumPy float32 traces pass on every seed and option, and the outcome says it sampled."""
    outcome = controller.run(_session(seed, **changes))
    steps = MASKED_STEPS if "mask_mode" in changes else SAMPLED_STEPS
    assert [c.name for c in outcome.checks] == steps
    assert all(c.ok and 0 <= c.ratio <= 1 for c in outcome.checks), outcome.checks
    assert outcome.reference is outcome.trace  # no full ground truth was built
    assert outcome.sampled.startswith(f"16 of {L_SAMPLED} query rows checked (seeded sample")


def test_the_sampled_rows_match_the_ground_truth_exactly_in_float64():
    """float64: the backend and the truth differ by rounding only (ratios far below 1)."""
    s = dataclasses.replace(_session(5), dtype="float64")
    checks = controller.run(s).checks
    assert [c.name for c in checks] == SAMPLED_STEPS
    assert all(c.ok for c in checks) and max(c.ratio for c in checks) < 0.1


@pytest.mark.parametrize("mask_mode", ["none", "causal-top-left", "causal-bottom-right"])
@pytest.mark.parametrize("step,index", [("head_outputs", 0), ("weights", 1)])
def test_a_wrong_value_in_a_sampled_row_fails(step, index, mask_mode):
    """One entry of a sampled row moved by 1e-3 fails its check (and only that one; with a
    causal mask the output made from it too), under either causal alignment or none."""
    s = _session(1, mask_mode=mask_mode)
    trace = nb.trace_example(*controller.example_and_options(s), dtype="float32")
    row = scratch.sample_rows(L_SAMPLED, sampled_check.SAMPLE_ROWS, sampled_check.SAMPLE_SEED)[3]
    trace[step].value[1, row, 0] += 1e-3  # head 1, a sampled row
    checks = sampled_check.sampled_checks(trace, controller.example_and_options(s)[1], "float32")
    failed = {c.name.split(" (")[0] for c in checks if not c.ok}
    assert step in failed and failed <= {step, "output"}, checks
    moved = next(c for c in checks if c.name.startswith(f"{step} ("))
    assert moved.max_abs_diff == pytest.approx(1e-3, rel=1e-2)


def test_a_wrong_value_outside_the_sample_is_not_seen():
    """What sampling gives up, shown: a mistake in an unsampled row passes."""
    s = _session(1)
    trace = nb.trace_example(*controller.example_and_options(s), dtype="float32")
    picked = set(scratch.sample_rows(L_SAMPLED, 16, 0))
    row = next(i for i in range(L_SAMPLED) if i not in picked)
    trace["head_outputs"].value[0, row, 0] += 1.0
    checks = sampled_check.sampled_checks(trace, controller.example_and_options(s)[1], "float32")
    assert [c.name for c in checks] == SAMPLED_STEPS
    assert all(c.ok for c in checks), checks


def test_small_sessions_and_the_ground_truth_backend_check_every_step():
    """At or below SAMPLE_FROM_TOKENS, and for scratch itself, the full comparison runs."""
    assert not sampled_check.wanted("numpy", sampled_check.SAMPLE_FROM_TOKENS)
    assert not sampled_check.wanted("scratch", 4096)
    assert sampled_check.wanted("torch-cpu", sampled_check.SAMPLE_FROM_TOKENS + 1)
    small = dataclasses.replace(random_session(2, num_tokens=8), backend="numpy")
    outcome = controller.run(small)
    assert outcome.sampled == "" and outcome.reference is not outcome.trace
    assert "weights" in [c.name for c in outcome.checks]


def test_the_session_takes_4096_tokens():
    assert MAX_TOKENS == 4096


@pytest.mark.parametrize("masking", ["bool", "causal", "none", "per-head"])
def test_may_attend_grid_from_arrays_matches_the_ground_truths(masking):
    """The vectorized grid (NumPy arrays) equals the one the list path builds: one grid when
    every head shares it, one per head when they differ."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 4))
    mask = rng.random((6, 6)) > 0.5
    mask[2] = False  # one fully masked row
    per_head = np.stack([mask, ~mask])  # (H, L, S): head 1 sees what head 0 may not
    kw = {
        "bool": {"attn_mask": mask.tolist()},
        "causal": {"is_causal": True},
        "none": {},
        "per-head": {"attn_mask": per_head.tolist()},
    }[masking]
    found = nb.trace_attention(x, num_heads=2, **kw)
    truth = scratch.trace_attention(x.tolist(), num_heads=2, **kw)
    assert found.allowed == truth.allowed
    if masking == "per-head":
        assert found.allowed == tuple(tuple(map(tuple, m)) for m in per_head.tolist())
    assert found["weights"].note == truth["weights"].note
    if masking == "bool":
        assert "2 fully masked row(s)" in found["weights"].note  # one row, two heads


def test_a_passing_check_shows_the_bound_where_the_difference_is_largest():
    """As compare_traces: max |difference| <= the bound shown whenever the step passes."""
    s = random_session(1, 300, 8, 4, 4, 2)  # a case whose worst ratio is not its largest diff
    s = dataclasses.replace(s, backend="numpy", dtype="float32")
    checks = controller.run(s).checks
    assert [c.name for c in checks] == SAMPLED_STEPS
    for check in checks:
        assert check.ok and check.max_abs_diff <= check.bound


def test_the_check_tab_names_the_sampled_tokens_and_shapes(qtbot):
    """The Check tab labels the sampled check's rows with their tokens and says "16 of L"."""
    pytest.importorskip("pyqtgraph")
    from gui.views.check_panel import CheckPanel

    outcome = controller.run(_session(3))
    rows = sampled_check.checked_rows(L_SAMPLED)
    assert rows[0] == 0 and rows[-1] == L_SAMPLED - 1 and rows != list(range(len(rows)))
    panel = CheckPanel()
    qtbot.addWidget(panel)
    panel.set_outcome(outcome)
    shapes = [panel.table.item(r, 1).text() for r in range(panel.table.rowCount())]
    assert shapes == [f"2 x 16 of {L_SAMPLED} x 2", f"2 x 16 of {L_SAMPLED} x {L_SAMPLED}"]
    for row, columns in ((0, ["0", "1"]), (1, [f"t{j}" for j in range(L_SAMPLED)])):
        panel.table.setCurrentCell(row, 0)
        shown = panel.diff_map.panel
        assert shown.row_labels == [f"t{i}" for i in rows]  # the tokens checked, in order
        assert shown.row_axis == f"query (16 sampled of {L_SAMPLED})"
        assert shown.col_labels == columns
        assert shown.image.shape == (16, len(columns))


def test_sampled_rows_of_a_real_text_are_labelled_with_their_position():
    """A token that does not spell its own position gets the row number in front."""
    pytest.importorskip("PyQt6")
    from gui.views.check_panel import _token_label

    assert _token_label(["t0", "t1"], 1) == "t1"
    assert _token_label(["the", "cat"], 1) == "1: cat"


@pytest.mark.parametrize("seed", range(3))
def test_a_custom_mask_reaches_backend_and_check_as_the_same_grid(seed):
    """A drawn mask (the GivenMask variant of its grid) passes the sampled check, and a wrong
    weight on a sampled row under it fails."""
    grid = np.random.default_rng(seed).random((L_SAMPLED, L_SAMPLED)) > 0.3
    grid[:, 0] = True  # every row sees key 0: the planted weight below is on an allowed key
    mask = tuple(map(tuple, grid.tolist()))
    s = _session(seed, "custom", mask)
    _, options = controller.example_and_options(s)
    assert options.attn_mask is None and options.variant.attn_mask == mask
    outcome = controller.run(s)
    assert [c.name for c in outcome.checks] == MASKED_STEPS
    assert all(c.ok for c in outcome.checks), outcome.checks
    row = sampled_check.checked_rows(L_SAMPLED)[5]
    outcome.trace["weights"].value[0, row, 0] += 1e-3
    checks = sampled_check.sampled_checks(outcome.trace, options, "float32")
    assert {c.name.split(" (")[0] for c in checks if not c.ok} == {"weights"}
