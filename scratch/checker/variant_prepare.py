"""A variant case made ready: seeded inputs, the exact ground truth and the allowed error (a
backward case's: dO, the exact gradients and each one's allowed error).

The ground truth is scratch.flex_attention (plain Python, math.fsum) on the inputs as rounded to
the checked dtype, with the case's rule built from scratch.variants and RoPE from scratch.rotary.
The allowed error is the rule of the plain checker: twice the largest error of correct reference
kernels in the checked dtype (variant_numpy.attend in one softmax, key by key, and over blocks of
16 with exp2), plus 4 units in the last place of max |truth|. The gradients' truth is
scratch.flex_attention_backward on the rounded inputs (RoPE's gradients turned back with
scratch.rotary_backward), their yardstick two correct reference backwards in the checked dtype
(D from rowsum(dO * O) and from rowsum(P * dP)).
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from scratch.bounds.tolerance import ACCUMULATE, UNIT_ROUNDOFF
from scratch.checker.cases import gauss
from scratch.checker.prepare import kept
from scratch.checker.reference import max_error, store
from scratch.checker.run import allowed_error
from scratch.checker.variant_cases import VariantCase, rotary_tables
from scratch.checker.variant_grads import GRADS, grads
from scratch.checker.variant_numpy import VariantData, attend, narrowed
from scratch.flex.backward import flex_attention_backward
from scratch.flex.forward import create_block_mask, flex_attention
from scratch.ops.rope import rotary, rotary_backward
from scratch.variants import ALiBi, Softcap, alibi_slopes, combine

_CACHE: OrderedDict = OrderedDict()
_GRAD_CACHE: OrderedDict = OrderedDict()
SANE = 16.0  # reference kernels within 16 (E + S) u max|v| of the truth, or an internal error


@dataclass
class VariantPrepared:
    """A case's rounded inputs (float64 arrays), truth (1, H, L, Ev) and allowed error."""

    case: VariantCase
    dtype: str
    data: VariantData
    truth: np.ndarray
    allowed: float = math.nan
    reference: float = math.nan  # the largest error of the reference kernels
    lse: np.ndarray | None = None  # (1, H, L) natural log; -inf for a row with no key, no sink
    lse_allowed: float = math.nan  # the same rule for a kernel's reported lse
    memo: dict = field(default_factory=dict)

    @property
    def empty_rows(self) -> np.ndarray:
        """(1, H, L, 1) bool: the rows that see no key (and have no sink): output 0 there."""
        return ~np.isfinite(self.lse)[..., None]


def rounded(x: object, dtype: str) -> np.ndarray:
    """Nested floats rounded to dtype, as float64 (numpy and torch round alike: IEEE)."""
    return store(np.asarray(x, dtype=np.float64), dtype)


def truth_variant(case: VariantCase, slopes: list[float] | None):
    """The case's rule as one scratch.variants object (None: plain attention)."""
    parts = [case.mask_variant(key) for key, _ in case.masks]
    if case.softcap is not None:
        parts.append(Softcap(case.softcap))
    if case.alibi:
        parts.append(ALiBi(tuple(slopes)))
    return combine(*parts) if parts else None


def make_data(case: VariantCase, dtype: str, seed: int) -> VariantData:
    """Seeded inputs, rounded to dtype, as float64 arrays."""
    rng = random.Random(f"{seed}:{case.name}")
    q = rounded(gauss(rng, case.q, case.q_size), dtype)
    k, v = rounded(gauss(rng, case.k), dtype), rounded(gauss(rng, case.v), dtype)
    H, S, E = case.q[1], case.k[2], case.q[3]
    slopes = rounded(alibi_slopes(H), dtype) if case.alibi else None
    sinks = rounded([rng.uniform(1.0, 3.0) for _ in range(H)], dtype) if case.sinks else None
    cos = sin = None
    if case.rotary is not None:
        cos, sin = (rounded(t, dtype) for t in rotary_tables(S, E))
    scale = 1.0 / math.sqrt(E) if case.scale is None else case.scale
    return VariantData(q, k, v, scale, slopes, sinks, cos, sin)


def truth_inputs(case: VariantCase, d: VariantData) -> tuple:
    """(q, k turned by RoPE, score_mod, block_mask, sinks, (q positions, k positions))."""
    q, k = d.q.tolist(), d.k.tolist()
    L, S = case.q[2], case.k[2]
    positions = list(range(case.shift, case.shift + L)), list(range(S))
    if case.rotary is not None:  # turn query i by position i + S - L, key j by position j
        q = rotary(q, positions[0], pairing=case.rotary)
        k = rotary(k, positions[1], pairing=case.rotary)
    variant = truth_variant(case, None if d.slopes is None else d.slopes.tolist())
    block_mask = score_mod = None
    if variant is not None and variant.mask_mod is not None:
        block_mask = create_block_mask(variant.mask_mod, 1, case.q[1], L, S, BLOCK_SIZE=16)
    if variant is not None:
        score_mod = variant.score_mod
    sinks = None if d.sinks is None else d.sinks.tolist()
    return q, k, score_mod, block_mask, sinks, positions


def ground_truth(case: VariantCase, d: VariantData) -> tuple[np.ndarray, np.ndarray]:
    """scratch.flex_attention on the rounded inputs: output (1, H, L, Ev) and lse (1, H, L)."""
    q, k, score_mod, block_mask, sinks, _ = truth_inputs(case, d)
    out, lse = flex_attention(
        q, k, d.v.tolist(), score_mod, block_mask, d.scale, enable_gqa=case.gqa, sinks=sinks,
        return_lse=True,
    )  # fmt: skip
    return np.asarray(out, dtype=np.float64), np.asarray(lse, dtype=np.float64)


def prepare_variant(case: VariantCase, dtype: str, seed: int) -> VariantPrepared:
    """The case's VariantPrepared (kept for the next kernel checked with the same settings)."""
    return kept(_CACHE, (case, dtype, seed), lambda: _prepare(case, dtype, seed), 128)


def _prepare(case: VariantCase, dtype: str, seed: int) -> VariantPrepared:
    """Seeded inputs, the truth, and the allowed error from the reference kernels."""
    d = make_data(case, dtype, seed)
    truth, lse = ground_truth(case, d)
    prep = VariantPrepared(case, dtype, d, truth, lse=lse)
    passes = [
        attend(case, d, dtype=dtype, with_lse=True),
        attend(case, d, dtype=dtype, block=1, with_lse=True),
        attend(case, d, dtype=dtype, block=16, exp2=True, with_lse=True),
    ]
    outs = [np.where(prep.empty_rows, 0.0, out) for out, _ in passes]  # (passes leave 0/0)
    if narrowed(dtype):  # 16 bits: transformers' eager attention too (every score step rounded)
        outs.append(attend(case, d, dtype=dtype, eager=True))
    prep.reference = max(max_error(o, prep.truth) for o in outs)
    sane = SANE * (case.q[3] + case.k[2]) * UNIT_ROUNDOFF[dtype] * float(np.max(np.abs(d.v)))
    if not prep.reference <= sane:  # the yardstick itself must agree with the truth
        raise RuntimeError(
            f"{case.name}: the reference kernels are {prep.reference:.3g} from the ground truth "
            f"(more than rounding, {sane:.3g}): the checker's own rule and truth disagree"
        )
    top = float(np.max(np.abs(prep.truth)))
    prep.allowed = allowed_error(prep.reference, top, dtype)
    prep.lse_allowed = lse_allowed(lse, [found for _, found in passes], case, dtype)
    return prep


def lse_allowed(truth: np.ndarray, found: list[np.ndarray], case: VariantCase, dtype: str):
    """The rule for a reported lse: twice the reference passes' largest error (rows with no
    key: -inf in both, no error), + 4 ulps of max |lse|, and at least the rounding of a sum of
    the row's E + S terms in the sums' dtype (scores summed in another order move the lse by
    about that)."""
    live = np.isfinite(truth)
    if not live.any():
        return 0.0
    worst = max(max_error(f, truth, live) for f in found)
    top = float(np.max(np.abs(truth[live])))
    floor = (case.q[3] + case.k[2]) * UNIT_ROUNDOFF[ACCUMULATE[dtype]] * max(top, 1.0)
    return allowed_error(worst, top, dtype, floor=floor)


@dataclass
class GradPrepared:
    """A variant case's inputs (the forward's), dO, true gradients and each one's allowed error."""

    prep: VariantPrepared
    d_out: np.ndarray
    truth: list
    allowed: list
    memo: dict = field(default_factory=dict)


def truth_grads(case: VariantCase, prep, d_out: np.ndarray) -> list[np.ndarray]:
    """scratch.flex_attention_backward on the rounded inputs, RoPE turned back."""
    d = prep.data
    q, k, score_mod, block, sinks, positions = truth_inputs(case, d)
    found = list(
        flex_attention_backward(
            q, k, d.v.tolist(), d_out.tolist(), score_mod, block, d.scale, case.gqa, sinks=sinks
        )
    )
    if case.rotary is not None:
        found[0] = rotary_backward(found[0], positions[0], pairing=case.rotary)
        found[1] = rotary_backward(found[1], positions[1], pairing=case.rotary)
    return [np.asarray(g, dtype=np.float64) for g in found]


def prepare_backward(case: VariantCase, dtype: str, seed: int) -> GradPrepared:
    """grad_output, the true gradients, and each gradient's allowed error (cached)."""
    case = replace(case, grad_output=False)  # the forward case's inputs, and a dO
    return kept(_GRAD_CACHE, (case, dtype, seed), lambda: _prepare_grads(case, dtype, seed), 128)


def _prepare_grads(case: VariantCase, dtype: str, seed: int) -> GradPrepared:
    """The forward case's VariantPrepared, a seeded dO, the true gradients, allowed errors."""
    prep = prepare_variant(case, dtype, seed)
    rng = random.Random(f"{seed}:{case.name}:grad_output")
    d_out = rounded(gauss(rng, case.q[:3] + (case.v[3],)), dtype)
    truth = truth_grads(case, prep, d_out)
    refs = [grads(case, prep.data, d_out, dtype=dtype, d_from_output=f) for f in (True, False)]
    if narrowed(dtype):  # 16 bits: torch autograd through eager attention too
        refs.append(grads(case, prep.data, d_out, dtype=dtype, eager=True))
    allowed_err = []
    u, n = UNIT_ROUNDOFF[dtype], case.q[3] + case.k[2]
    u_sum = UNIT_ROUNDOFF[ACCUMULATE[dtype]]  # the precision of the sums (float32 for 16 bits)
    for g, t in enumerate(truth):
        r = max(max_error(ref[g], t) for ref in refs)
        top = float(np.max(np.abs(t)))
        if not r <= SANE * n * u * max(top, 1.0):
            raise RuntimeError(
                f"{case.name}: the reference backward is {r:.3g} from the true {GRADS[g]} "
                f"(more than rounding): the checker's own rule and truth disagree"
            )
        # references that happen to agree closely leave only the ulp floor; a correct kernel
        # summing the n = E + S terms of a gradient in another order may differ by about n
        # roundings of the largest entry in its sums' dtype (float32 for 16-bit storage; seen in
        # float64: 4 false alarms over seeds 20-199)
        allowed_err.append(allowed_error(r, top, dtype, floor=n * u_sum * top))
    return GradPrepared(prep, d_out, truth, allowed_err)


__all__ = [
    "GradPrepared",
    "VariantPrepared",
    "ground_truth",
    "lse_allowed",
    "truth_inputs",
    "make_data",
    "prepare_backward",
    "prepare_variant",
    "truth_variant",
]
