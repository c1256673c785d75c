"""The variant kinds of case (check_variants and check_variants_backward, run.py): the output,
or the gradients, compared with scratch.flex_attention's, the mistake named.

The gradients' truth is scratch.flex_attention_backward on the rounded inputs (RoPE's gradients
turned back with scratch.rotary_backward); each gradient passes under the forward's rule, with
two correct reference backwards in the checked dtype (D from rowsum(dO * O) and from
rowsum(P * dP)). See the README's checker section ("Variants").
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

import numpy as np

from ..flex_backward import flex_attention_backward
from ..rope import rotary_backward
from ..tolerance import UNIT_ROUNDOFF
from .cases import gauss
from .report import CaseResult
from .run import Kind, allowed_error, call, not_taken
from .variant_cases import VariantCase
from .variant_diagnosis import diagnose, diagnose_backward
from .variant_keywords import NoKeyword, keywords
from .variant_numpy import GRADS, grads
from .variant_prepare import SANE, VariantPrepared, prepare_variant, rounded, truth_inputs

_CACHE: dict = {}


def variant_inputs(kind: Kind, case, result: CaseResult, made, prep, tensors: tuple):
    """(made, args, keywords of fn's style), or None (unsupported) when fn cannot be given the
    case's variant."""
    try:
        kw = keywords(case, prep, kind.arrays, kind.dtype, kind.style, kind.accepts)
    except NoKeyword as exc:
        result.status, result.message = "unsupported", str(exc)
        return None
    if not_taken(result, kw, kind.accepts):
        return None
    return made, tuple(kind.arrays.make(x.tolist(), kind.dtype) for x in tensors), kw


class Variant(Kind):
    """fn(q, k, v, **keywords of its style) -> output (1, H, L, Ev)."""

    def inputs(self, case, result: CaseResult) -> tuple | None:
        """The case's rounded inputs and its keywords."""
        prep = prepare_variant(case, self.dtype, self.seed)
        d = prep.data
        return variant_inputs(self, case, result, prep, prep, (d.q, d.k, d.v))

    def call(self, args: tuple, kwargs: dict) -> object:
        """The output (weights, if returned, are not checked)."""
        return call(self.fn, args, kwargs)[0]

    def judge(self, result, prep: VariantPrepared, args, kwargs, out) -> CaseResult:
        """Compare the output with the ground truth; diagnose a failure."""
        try:
            got = np.asarray(self.arrays.floats(out), dtype=np.float64)
        except (TypeError, ValueError, AttributeError) as exc:  # None, a string, ragged lists...
            result.message = f"fn's result is not an array of numbers: {type(out).__name__} ({exc})"
            return result
        expected = prep.truth.shape
        if got.shape != expected:
            result.message = f"output shape {got.shape}, expected {expected} (1, H, L, Ev)"
            return result
        with np.errstate(invalid="ignore"):
            diff = np.abs(got - prep.truth)
        result.max_error = float(np.max(diff)) if np.all(np.isfinite(diff)) else float("inf")
        result.bound = prep.allowed
        result.ratio = result.max_error / prep.allowed if prep.allowed > 0 else float("inf")
        result.diff = diff.tolist()
        if result.ratio <= 1.0:
            result.status = "pass"
            return result
        result.message = (
            f"max error {result.max_error:.3g} > allowed {prep.allowed:.3g} ({2:g}x the largest "
            f"error of the correct reference {self.dtype} kernels, {prep.reference:.3g}, + 4 ulps)"
        )
        result.diagnosis = diagnose(prep, got, self.style)
        return result


def backward_case(case: VariantCase) -> VariantCase:
    """The variant case with a grad_output: check_variants_backward's case."""
    return dataclasses.replace(case, grad_output=True)


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
    case = dataclasses.replace(case, grad_output=False)  # the forward case's inputs, and a dO
    key = (case, dtype, seed)
    if key in _CACHE:
        return _CACHE[key]
    prep = prepare_variant(case, dtype, seed)
    rng = random.Random(f"{seed}:{case.name}:grad_output")
    d_out = rounded(gauss(rng, case.q[:3] + (case.v[3],)), dtype)
    truth = truth_grads(case, prep, d_out)
    refs = [grads(case, prep.data, d_out, dtype=dtype, d_from_output=f) for f in (True, False)]
    allowed_err = []
    u, n = UNIT_ROUNDOFF[dtype], case.q[3] + case.k[2]
    for g, t in enumerate(truth):
        r = max(float(np.max(np.abs(ref[g] - t))) for ref in refs)
        top = float(np.max(np.abs(t)))
        if not r <= SANE * n * u * max(top, 1.0):
            raise RuntimeError(
                f"{case.name}: the reference backward is {r:.3g} from the true {GRADS[g]} "
                f"(more than rounding): the checker's own rule and truth disagree"
            )
        # references that happen to agree closely leave only the ulp floor; a correct kernel
        # summing the n = E + S terms of a gradient in another order may differ by about n
        # roundings of the largest entry (seen in float64: 4 false alarms over seeds 20-199)
        allowed_err.append(allowed_error(r, top, dtype, floor=n * u * top))
    made = GradPrepared(prep, d_out, truth, allowed_err)
    if len(_CACHE) > 128:
        _CACHE.clear()
    _CACHE[key] = made
    return made


class VariantBackward(Kind):
    """backward(q, k, v, grad_output, **keywords) -> (dq, dk, dv[, dsinks])."""

    def inputs(self, case, result: CaseResult) -> tuple | None:
        """The case's rounded inputs, dO and its keywords."""
        made = prepare_backward(case, self.dtype, self.seed)
        d = made.prep.data
        return variant_inputs(self, case, result, made, made.prep, (d.q, d.k, d.v, made.d_out))

    def judge(self, result, made: GradPrepared, args, kwargs, found) -> CaseResult:
        """Compare each gradient with the ground truth's; diagnose a failure."""
        try:
            got = [np.asarray(self.arrays.floats(g), dtype=np.float64) for g in found]
        except (TypeError, ValueError, AttributeError) as exc:  # None, a string, ragged lists...
            result.message = (
                f"fn's gradients are not arrays of numbers: {type(found).__name__} ({exc})"
            )
            return result
        truth, allowed_err = made.truth, made.allowed
        if len(got) != len(truth) or any(g.shape != t.shape for g, t in zip(got, truth)):
            result.message = (
                f"returned {len(got)} gradients of shapes {[g.shape for g in got]}, expected "
                f"{[t.shape for t in truth]} ({', '.join(GRADS[: len(truth)])})"
            )
            return result
        worst, name = 0.0, GRADS[0]
        for g, t, a, n in zip(got, truth, allowed_err, GRADS):
            with np.errstate(invalid="ignore"):
                err = float(np.max(np.abs(g - t)))
            ratio = err / a if a > 0 and np.isfinite(err) else float("inf")
            if ratio >= worst:
                worst, name, result.max_error, result.bound = ratio, n, err, a
        result.ratio = worst
        if worst <= 1.0:
            result.status = "pass"
            return result
        result.message = f"{name}: max error {result.max_error:.3g} > allowed {result.bound:.3g}"
        result.diagnosis = diagnose_backward(made, got)
        return result


__all__ = ["Variant", "VariantBackward", "prepare_backward"]
