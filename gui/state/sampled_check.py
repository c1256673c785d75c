"""The window's check at large sizes: a seeded sample of query rows against the ground truth.

The full pure-Python ground truth costs seconds at 512 tokens and minutes at 4096. Query rows
are independent, so above SAMPLE_FROM_TOKENS a NumPy or torch trace is checked on
SAMPLE_ROWS rows (scratch.sample_rows: seeded, first and last row always in): the ground
truth's weights and head outputs for those rows (scratch.attention_rows), computed from the
backend's own q, k and v, against scratch.tolerance's bound. With a variant (a mask, score
change, learned sinks, RoPE) every step of those rows is checked instead: the ground truth's own
variant steps for the rows alone (scratch.trace.variant_rows), each step within its own bound as the
full check bounds it (q_rotated, scores, scaled, masked, weights, sink_weights, outputs; and
k_rotated on every key, which the rows read). The projections that made q, k and v are not
checked in this mode, and the window says so.

Two parts, so the window can run the ground truth while the backend is still attending:
`row_problem` reads what the ground truth needs from q, k and v (given to the trace's
`on_projected` hook), `checks_against` compares once the trace is done.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

import scratch
from gui.state import truth_process
from scratch import step_check
from scratch.backends import split_heads
from scratch.bounds.weights_tolerance import weights_tolerance
from scratch.trace import variant_rows
from scratch.variants import GivenMask

SAMPLE_FROM_TOKENS = 256  # above this many query tokens (with a NumPy or torch backend)
SAMPLE_ROWS = 16
SAMPLE_SEED = 0


def wanted(backend: str, num_tokens: int) -> bool:
    """True when the check should sample rows instead of running the full ground truth."""
    return backend != "scratch" and num_tokens > SAMPLE_FROM_TOKENS


def describe(num_tokens: int) -> str:
    """The sentence the window shows about a sampled check."""
    rows = min(SAMPLE_ROWS, num_tokens)
    return (
        f"{rows} of {num_tokens} query rows checked (seeded sample, seed {SAMPLE_SEED}, first "
        f"and last row included) from the backend's own q, k, v; projections not checked"
    )


def check_name(step: str, count: int) -> str:
    """The name of a sampled check of `step` over `count` rows (read back by `sampled_view`)."""
    return f"{step} ({count} sampled rows)"


def sampled_view(name: str, trace: object) -> tuple[str, list[int]] | None:
    """(the trace step a sampled check compares, the query rows it checked), or None when
    `name` is not a sampled check's."""
    step, _, rest = name.partition(" (")
    if not rest.endswith(" sampled rows)") or step not in trace:
        return None
    return step, checked_rows(len(trace.tokens))


def checked_rows(num_tokens: int) -> list[int]:
    """The query rows a sampled check looks at: seeded, first and last included, sorted."""
    return scratch.sample_rows(num_tokens, min(SAMPLE_ROWS, num_tokens), SAMPLE_SEED)


def _per_head(value: object, heads: int, rows: list[int] | None = None) -> np.ndarray:
    """A trace step's `rows` (all when None) as float64 (heads, rows, cols); one-head steps get
    a leading axis. Rows are picked before the float64 copy (the whole weights are 16.7 M
    numbers per head at 4096 tokens)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
    picked = value if rows is None else value[..., rows, :]
    if hasattr(picked, "double"):  # a tensor: NumPy cannot read bfloat16, float64 it can
        picked = picked.double()
    arr = np.asarray(picked, np.float64)
    return arr if arr.ndim == 3 else arr.reshape(heads, *arr.shape[-2:])


@dataclass(frozen=True)
class RowProblem:
    """The ground truth's inputs for the sampled rows, read from the backend's own q, k, v."""

    rows: list[int]  # the sampled query rows, sorted
    q: np.ndarray  # (H, L, d_k) float64
    k: np.ndarray  # (Hkv, S, d_k)
    v: np.ndarray  # (Hkv, S, d_v)
    options: object  # attention_rows' Options: the sampled rows' mask (R, S), as nested lists
    # (the ground truth takes them), the trace's scale, GQA, masked rows; for a variant, its
    # RowsCall (scratch.trace.variant_rows: the rows, scale, RoPE, sinks, score change, mask rows)

    @property
    def variant(self) -> bool:
        """Whether the call has a variant: every step of the sampled rows is checked."""
        return isinstance(self.options, variant_rows.RowsCall)

    def arguments(self) -> tuple:
        """The ground truth's positional arguments as nested lists: the sampled rows of q (only
        those are passed: rows are independent), every key and value (and for attention_rows
        every passed row)."""
        q_rows, k, v = self.q[:, self.rows].tolist(), self.k.tolist(), self.v.tolist()
        return (q_rows, k, v) if self.variant else (q_rows, k, v, list(range(len(self.rows))))


def row_problem(
    q, k, v, scale: float, heads: tuple[int, int], options: scratch.Options
) -> RowProblem:
    """The RowProblem of a trace's q (L, H * d_k), k and v (S, Hkv * d) (arrays or tensors),
    made with `options` (the session's)."""
    H, Hkv = heads
    q = split_heads(_per_head(q, 1)[0], H)  # (H, L, d_k)
    k = split_heads(_per_head(k, 1)[0], Hkv)  # (Hkv, S, d_k)
    v = split_heads(_per_head(v, 1)[0], Hkv)  # (Hkv, S, d_v)
    rows = checked_rows(q.shape[1])
    mask_rows = None
    if options.variant is not None:  # a variant (is_causal, attn_mask joined in): its mask,
        # score change, sinks and RoPE in the ground truth's own steps for the sampled rows
        call = variant_rows.rows_call(options, rows, q.shape[1], k.shape[1], scale)
        return RowProblem(rows, q, k, v, call)
    if isinstance(variant := scratch.sdpa_variant(options, "the window's sampled check"),
                    GivenMask):  # fmt: skip
        mask = variant.attn_mask  # a given mask: its sampled rows, (R, S)
        mask_rows = mask[rows].tolist() if hasattr(mask, "shape") else [mask[i] for i in rows]
    elif variant is not None:  # is_causal: the sampled rows of its grid, (R, S)
        mask_rows = variant.cells(rows, range(k.shape[1]))
    sampled = scratch.Options(mask_rows, scale=scale, enable_gqa=H != Hkv,
                               masked_rows=options.masked_rows)  # fmt: skip
    return RowProblem(rows, q, k, v, sampled)


def sampled_checks(trace: object, options: scratch.Options, dtype: str) -> list[scratch.StepCheck]:
    """Checks of the sampled rows' head outputs and weights, every head, the ground truth
    computed here (the window computes it beside the trace: gui.state.truth_process)."""
    heads = (trace.num_heads, trace.num_kv_heads)
    values = (trace["q"].value, trace["k"].value, trace["v"].value)
    problem = row_problem(*values, trace.scale, heads, options)
    truth = truth_process.exact_rows(problem.arguments(), problem.options)
    return checks_against(trace, problem, truth, dtype)


def checks_against(
    trace: object, problem: RowProblem, truth: tuple, dtype: str
) -> list[scratch.StepCheck]:
    """The trace's sampled rows of head outputs and weights against the ground truth's `truth`
    (exact_rows of `problem`, which was read from this trace's q, k and v); for a variant every
    step, each within its own bound (scratch.bounds.step_bounds)."""
    if problem.variant:
        return variant_checks(trace, problem.rows, truth, dtype)
    H, Hkv = trace.num_heads, trace.num_kv_heads
    rows, q, k = problem.rows, problem.q, problem.k
    mask_rows, scale = problem.options.attn_mask, problem.options.scale
    weights = _per_head(trace["weights"].value, H, rows)  # (H, R, S)
    name = "head_outputs" if "head_outputs" in trace else "output"
    outputs = _per_head(trace[name].value, H, rows)  # (H, R, d_v)
    # step 1: the ground truth for the sampled rows of every head (exact, from q, k, v)
    out_t, w_t = (np.asarray(t, np.float64) for t in truth)  # (H, R, d_v), (H, R, S)
    # step 2: the bound per output element (row-independent, so the sampled rows alone), every
    # head in one call on float64 arrays (nested lists would be walked and checked element by
    # element: 131k weights at 4096 tokens and two heads)
    float_mask = None
    if mask_rows is not None and not isinstance(mask_rows[0][0], bool):
        float_mask = np.asarray(mask_rows, np.float64)  # (R, S), the same for every head
    out_bound = np.asarray(
        scratch.tolerance(
            q[:, rows],
            k,
            problem.v,
            np.nan_to_num(w_t),
            scale=scale,
            dtype=dtype,
            attn_mask=float_mask,
            enable_gqa=H != Hkv,
        ),
        np.float64,
    )  # (H, R, d_v)
    # step 3: weights within scratch.bounds.weights_tolerance's bound (the same rounding model)
    w_bound = np.asarray(
        weights_tolerance(
            q[:, rows],
            k,
            w_t,
            scratch.Options(float_mask, scale=scale, enable_gqa=H != Hkv),
            dtype,
        ),
        np.float64,
    )  # (H, R, S)
    return [  # outputs first: the Check tab opens on the first row, a readable (R, d_v) image
        step_check(check_name(name, len(rows)), outputs, out_t, out_bound, dtype),
        step_check(check_name("weights", len(rows)), weights, w_t, w_bound, dtype),
    ]


def variant_checks(trace: object, rows: list[int], truth: dict, dtype: str) -> list:
    """A variant's steps on the sampled rows (k_rotated on every key: the rows read them all)
    against the ground truth's, named as sampled checks where they have a query axis."""
    checks = variant_rows.compare_rows(trace, rows, truth, dtype)
    return [
        dataclasses.replace(c, name=check_name(c.name, len(rows)))
        if "query" in trace[c.name].axes
        else c
        for c in checks
    ]
