"""A variant's steps for a sample of query rows, and a trace's same rows compared with them.

Query rows are independent: row i reads q[i], every key and value, and row i of the mask. So
the ground truth's own steps for a variant (the head kernel `attention.attend` with the
variant's hooks: RoPE, scores, the score change, the mask, the softmax with learned sinks,
weights @ v) computed on a few rows are
exactly those rows of its full trace, at (rows x S x E) cost. `variant_rows` computes them, the
mask given as its sampled rows (read beforehand from the variant's own mask_mod: a 4096 x 4096
attn_mask is never read whole in plain Python). `compare_rows` compares a backend trace's same
rows step by step with `compare_traces`, each step within its own bound (`step_bounds`): every
bound is row by row, so the rows alone get the bound the full comparison gives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import inf

from scratch.core.multihead import concat_heads
from scratch.core.options import Options
from scratch.core.variant_steps import Pieces, attend_heads, head_steps, pieces
from scratch.trace.compare import StepCheck, compare_traces
from scratch.trace.trace_types import Step, Trace
from scratch.variants import GivenMask, Variant
from scratch.variants.combine import compose

# the steps a sampled comparison holds, in trace order: q, k, v only for the later bounds
READ = ("q", "k", "v")
COMPARED = ("q_rotated", "k_rotated", "scores", "scaled", "masked", "weights", "sink_weights",
            "head_outputs", "output")  # fmt: skip


class SampledRule(Variant):
    """A variant's mask and score change on its sampled query rows: the mask parts' own
    mask_mods, a given attn_mask as its sampled rows' cells, the score parts' own score_mod."""

    def __init__(self, rows: list[int], seen: list | None, mask_mods: tuple, score_mod: object):
        self.index = {i: n for n, i in enumerate(rows)}  # query index -> row of `seen`
        self.seen = seen  # (1 or H, R, S) bools: may query rows[n] see key j; None: no attn_mask
        self.mask_mods = mask_mods  # the rules' own (causal, window, documents, ...)
        if seen is not None or mask_mods:
            self.mask_mod = self._sees
        self.score_mod = score_mod

    def _sees(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        if self.seen is not None:
            given = self.seen[h if len(self.seen) > 1 else 0]
            if not given[self.index[q_idx]][kv_idx]:
                return False
        return all(m(b, h, q_idx, kv_idx) for m in self.mask_mods)

    def rule(self) -> str:
        return f"a variant's mask and score change on {len(self.index)} sampled rows"


def given_rows(mask: GivenMask, rows: list[int], S: int) -> list:
    """A given attn_mask's cells on query `rows`: (1 or H, R, S) bools (a float mask: not -inf).
    An array or tensor gives those rows alone (a window's 4096 x 4096 mask is not read whole
    in plain Python); nested lists are read by the mask's own mask_mod."""
    m = mask.attn_mask
    if not hasattr(m, "shape") or not hasattr(m, "reshape"):
        heads = mask.shape[1]
        return [[[mask.mask_mod(0, h, i, j) for j in range(S)] for i in rows] for h in range(heads)]
    shape = (1,) * (4 - len(m.shape)) + tuple(m.shape)  # (B, H, L, S), size-1 axes broadcast
    m = m.reshape(shape)[0]  # one example: (H or 1, L or 1, S or 1)
    picked = m[:, list(rows) if shape[2] > 1 else [0] * len(rows)]  # (H or 1, R, S or 1)
    seen = picked if "bool" in str(m.dtype) else picked != -inf
    found = seen.tolist()
    if shape[3] == 1:  # one column for every key
        found = [[row * S for row in head] for head in found]
    return found


@dataclass(frozen=True)
class RowsCall:
    """How `variant_rows` computes: the sampled rows of L, the scale, the variant's pieces (its
    rule a SampledRule), the masked_rows policy."""

    rows: list[int]
    L: int
    scale: float
    pieces: Pieces
    masked_rows: str


def rows_call(options: Options, rows: list[int], L: int, S: int, scale: float) -> RowsCall:
    """The RowsCall of `options`' variant (is_causal and attn_mask joined in) for query `rows` of
    L queries and S keys. What travels: the parts' own plain mask_mods and score_mods, and a
    bool attn_mask's sampled rows (not its whole array)."""
    p = pieces(options)
    parts = p.rules
    given = [part for part in parts if isinstance(part, GivenMask)]
    seen = None
    for part in given:  # and-ed, cell by cell
        found = given_rows(part, rows, S)
        if seen is not None and len(found) != len(seen):  # one per head vs one for all
            seen, found = _per_head(seen, len(found)), _per_head(found, len(seen))
        seen = found if seen is None else _and(seen, found)
    masks = tuple(
        part.mask_mod
        for part in parts
        if part.mask_mod is not None and not isinstance(part, GivenMask)
    )
    mods = [part.score_mod for part in parts if part.score_mod is not None]
    score_mod = None if not mods else mods[0] if len(mods) == 1 else compose(*mods)
    rule = None
    if seen is not None or masks or score_mod is not None:
        rule = SampledRule(list(rows), seen, masks, score_mod)
    return RowsCall(list(rows), L, scale, Pieces(p.rotary, p.sinks, rule), options.masked_rows)


def _per_head(seen: list, heads: int) -> list:
    """(1, R, S) -> (heads, R, S); already per head: as it is."""
    return seen * heads if len(seen) == 1 else seen


def _and(a: list, b: list) -> list:
    """Cell by cell a and b, (H, R, S) each."""
    return [[[x and y for x, y in zip(r, s)] for r, s in zip(ha, hb)] for ha, hb in zip(a, b)]


def variant_rows(q: list, k: list, v: list, call: RowsCall) -> dict[str, list]:
    """The ground truth's steps of the sampled rows: q (H, R, E) those rows only, k (Hkv, S, E),
    v (Hkv, S, Ev). Returns per head scores, scaled, masked, weights (H, R, S) and output
    (H, R, Ev); q_rotated (H, R, E) and k_rotated (Hkv, S, E) under RoPE; sink_weights (H, R)."""
    group = len(q) // len(k)
    at = (call.rows, call.L)
    heads = attend_heads(q, k, v, call.scale, call.pieces, call.masked_rows, group, rows=at)
    return head_steps(heads, group)


def pick_rows(value: object, rows: list[int], axis: int) -> object:
    """`rows` of `value` along `axis` (an array, a tensor or nested lists)."""
    if hasattr(value, "shape"):
        return value[(slice(None),) * axis + (list(rows),)]
    if axis == 0:
        return [value[i] for i in rows]
    return [pick_rows(part, rows, axis - 1) for part in value]


def _truth_value(name: str, step: Step, truth: dict[str, list]) -> object:
    """The truth's value of step `name`, laid out as the trace lays it out."""
    if name in ("q_rotated", "k_rotated"):  # (heads, n, d) -> (n, heads * d)
        return concat_heads(truth[name], ())
    if name == "output" and step.axes[0] != "head" and len(truth["output"]) > 1:
        return concat_heads(truth["output"], ())  # several heads side by side
    key = "output" if name == "head_outputs" else name
    return truth[key] if step.axes[0] == "head" else truth[key][0]


def compare_rows(trace: Trace, rows: list[int], truth: dict[str, list], dtype: str) -> list:
    """StepCheck of each step of `trace` (a variant's) on query `rows` against `truth`
    (variant_rows of the trace's own q, k, v): q_rotated, scores, scaled, masked, weights,
    sink_weights, output on those rows, k_rotated on every key. q, k and v are the truth's own
    inputs, not checked (compared only so the later steps' bounds read them)."""
    wanted = READ + COMPARED
    names = [n for n in trace.names() if n in wanted and not (n == "output" and "w_o" in trace)]
    got, want = [], []
    for name in names:
        step = trace[name]
        axis = step.axes.index("query") if "query" in step.axes else None
        value = step.value if axis is None else pick_rows(step.value, rows, axis)
        got.append(Step(name, step.formula, value, step.note, step.axes))
        truth_value = value if name in READ else _truth_value(name, step, truth)
        want.append(Step(name, step.formula, truth_value, step.note, step.axes))
    labels = tuple(trace.tokens[i] for i in rows)
    made = [
        Trace(tuple(s), labels, trace.key_tokens, trace.scale, trace.num_heads,
              trace.num_kv_heads, None, trace.options, trace.source)
        for s in (got, want)
    ]  # fmt: skip
    checks: list[StepCheck] = compare_traces(*made, dtype=dtype)
    return [c for c in checks if c.name not in READ]


__all__ = ["RowsCall", "SampledRule", "compare_rows", "rows_call", "variant_rows"]
