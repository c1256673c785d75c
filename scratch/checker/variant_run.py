"""The variant kinds of case (check_variants and check_variants_backward, run.py): the output,
or the gradients, compared with scratch.flex_attention's, the mistake named.

Each gradient passes under the forward's rule (variant_prepare.py: the truths and the allowed
errors). See the README's checker section ("Variants").
"""

from __future__ import annotations

import numpy as np

from scratch.checker.report import CaseResult
from scratch.checker.run import Kind, call, not_taken
from scratch.checker.variant_cases import VariantCase
from scratch.checker.variant_diagnosis import diagnose, diagnose_backward
from scratch.checker.variant_keywords import NoKeyword, keywords
from scratch.checker.variant_numpy import GRADS
from scratch.checker.variant_prepare import (
    GradPrepared,
    VariantPrepared,
    prepare_backward,
    prepare_variant,
)


class Variant(Kind):
    """fn(q, k, v, **keywords of its style) -> output (1, H, L, Ev)."""

    def inputs(self, case: VariantCase, result: CaseResult) -> tuple | None:
        """The case's rounded inputs (a backward case's: and dO) and its keywords; None
        (unsupported) when fn cannot be given the case's variant."""
        if case.grad_output:
            made = prepare_backward(case, self.dtype, self.seed)
            prep, tensors = made.prep, (made.d_out,)
        else:
            made = prep = prepare_variant(case, self.dtype, self.seed)
            tensors = ()
        try:
            kw = keywords(case, prep, self.arrays, self.dtype, self.style, self.accepts)
        except NoKeyword as exc:
            result.status, result.message = "unsupported", str(exc)
            return None
        if not_taken(result, kw, self.accepts):
            return None
        d = prep.data
        args = tuple(self.arrays.make(x.tolist(), self.dtype) for x in (d.q, d.k, d.v, *tensors))
        return made, args, kw

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


class VariantBackward(Variant):
    """backward(q, k, v, grad_output, **keywords) -> (dq, dk, dv[, dsinks])."""

    call = Kind.call  # the gradients as fn returns them

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


__all__ = ["Variant", "VariantBackward"]
