"""The variant kinds of case (check_variants and check_variants_backward, run.py): the output,
or the gradients, compared with scratch.flex_attention's, the mistake named.

Each gradient passes under the forward's rule (variant_prepare.py: the truths and the allowed
errors). See the README's checker section ("Variants").
"""

from __future__ import annotations

import numpy as np

from scratch.checker.report import CaseResult, shape_text
from scratch.checker.run import Kind, call, not_taken
from scratch.checker.variant_cases import VariantCase
from scratch.checker.variant_diagnosis import diagnose, diagnose_backward
from scratch.checker.variant_grads import GRADS
from scratch.checker.variant_keywords import NoKeyword, keywords
from scratch.checker.variant_layout import (
    INTERFACE,
    from_kernel,
    kernel_shape,
    layout_words,
    to_kernel,
)
from scratch.checker.variant_lse import judge_lse, lse_base, read_lse
from scratch.checker.variant_prepare import (
    GradPrepared,
    VariantPrepared,
    make_data,
    prepare_backward,
    prepare_variant,
)


class Variant(Kind):
    """fn(q, k, v, **keywords of its style) -> output (1, H, L, Ev), or in FlashAttention's own
    layout for its interface's styles (variant_layout.py); an lse beside it is checked in the
    base the setting lse_base names ('e' or 2)."""

    def __init__(self, fn, arrays, dtype: str, seed: int, **settings):
        super().__init__(fn, arrays, dtype, seed, **settings)
        self.lse_base = lse_base(settings.get("lse_base", "e"))

    def inputs(self, case: VariantCase, result: CaseResult) -> tuple | None:
        """The case's rounded inputs (a backward case's: and dO) and its keywords; None
        (unsupported) when fn cannot be given the case's variant."""
        if self.style in INTERFACE:  # the shapes as fn gets them
            shapes = (kernel_shape(self.style, n) for n in (case.q, case.k, case.v))
            result.shapes = shape_text(*shapes)
        data = make_data(case, self.dtype, self.seed)  # cheap; the truth only for cases run
        try:
            kw = keywords(case, data, self.arrays, self.dtype, self.style, self.accepts)
        except NoKeyword as exc:
            result.status, result.message = "unsupported", str(exc)
            return None
        if not_taken(result, kw, self.accepts):
            return None
        if case.grad_output:
            made = prepare_backward(case, self.dtype, self.seed)
            prep, tensors = made.prep, (made.d_out,)
        else:
            made = prep = prepare_variant(case, self.dtype, self.seed)
            tensors = ()
        d, style = prep.data, self.style
        tensors = (to_kernel(style, x) for x in (d.q, d.k, d.v, *tensors))  # the kernel's layout
        args = tuple(self.arrays.make(x.tolist(), self.dtype) for x in tensors)
        return made, args, kw

    def call(self, args: tuple, kwargs: dict) -> tuple[object, object]:
        """(output, what came beside it or None): FlashAttention's interface returns out, or a
        tuple led by out, (out, softmax_lse[, S_dmask]); the other styles out, (out, lse) or
        (out, weights). An lse is checked (variant_lse.py); weights are not."""
        if self.style in INTERFACE:
            found = self.fn(*args, **kwargs)
            if isinstance(found, (tuple, list)) and found:
                return found[0], found[1] if len(found) > 1 else None
            return found, None
        return call(self.fn, args, kwargs)

    def read(self, x: object, shape: tuple) -> np.ndarray | str:
        """fn's array (expected: `shape` (B, H, N, D) in the kernel's layout; dsinks (H,) as it
        is) as float64 in `shape`, or what is wrong with it."""
        try:
            got = np.asarray(self.arrays.floats(x), dtype=np.float64)
        except (TypeError, ValueError, AttributeError) as exc:  # None, a string, ragged lists...
            return f"not an array of numbers: {type(x).__name__} ({exc})"
        if len(shape) != 4:  # dsinks
            return got if got.shape == shape else f"shape {got.shape}, expected {shape}"
        want = kernel_shape(self.style, shape)
        if got.shape != want:
            return f"shape {got.shape}, expected {want} {layout_words(self.style)}"
        return from_kernel(self.style, got, shape)

    def judge(self, result, prep: VariantPrepared, args, kwargs, found) -> CaseResult:
        """Compare the output (and a reported lse) with the ground truth; diagnose a failure."""
        out, beside = found
        got = self.read(out, prep.truth.shape)
        if isinstance(got, str):
            result.message = f"fn's output: {got}"
            result.diagnosis = layout_mistake(self.style, out, prep.truth.shape)
            return result
        with np.errstate(invalid="ignore"):
            diff = np.abs(got - prep.truth)
        result.max_error = float(np.max(diff)) if np.all(np.isfinite(diff)) else float("inf")
        result.bound = prep.allowed
        result.ratio = result.max_error / prep.allowed if prep.allowed > 0 else float("inf")
        result.diff = diff.tolist()
        if result.ratio <= 1.0:
            result.status = "pass"
            if self.reports_lse(beside):
                self.judge_lse(result, prep, beside)
            return result
        result.message = (
            f"max error {result.max_error:.3g} > allowed {prep.allowed:.3g} ({2:g}x the largest "
            f"error of the correct reference {self.dtype} kernels, {prep.reference:.3g}, + 4 ulps)"
        )
        result.diagnosis = diagnose(prep, got, self.style)
        return result

    def reports_lse(self, beside: object) -> bool:
        """Whether what came beside the output is an lse to check: FlashAttention's interface's
        second item always (softmax_lse), else an array (or nested lists) of three axes, one
        fewer than the output's."""
        if beside is None:
            return False
        try:
            return self.style in INTERFACE or np.ndim(beside) == 3
        except ValueError:  # ragged lists: not an lse (weights are not read either)
            return False

    def judge_lse(self, result: CaseResult, prep: VariantPrepared, beside: object) -> None:
        """Fail a passing case whose reported lse is wrong (unreadable, shaped wrong, off)."""
        got = read_lse(beside, self.arrays, self.style, prep.truth.shape)
        if isinstance(got, str):
            result.status, result.message = "fail", f"fn's lse: {got}"
            return
        result.status = "fail"
        judge_lse(result, prep, got, self.lse_base)


class VariantBackward(Variant):
    """backward(q, k, v, grad_output, **keywords) -> (dq, dk, dv[, dsinks])."""

    call = Kind.call  # the gradients as fn returns them

    def judge(self, result, made: GradPrepared, args, kwargs, found) -> CaseResult:
        """Compare each gradient with the ground truth's; diagnose a failure."""
        truth, allowed_err = made.truth, made.allowed
        n = len(found) if isinstance(found, (tuple, list)) else None
        if n != len(truth):
            said = f"{n} gradients" if n is not None else f"a {type(found).__name__}"
            result.message = (
                f"returned {said}, expected {len(truth)}: {', '.join(GRADS[: len(truth)])}"
            )
            return result
        got = []
        for g, t, name in zip(found, truth, GRADS):
            read = self.read(g, t.shape)
            if isinstance(read, str):
                result.message = f"{name}: {read}"
                return result
            got.append(read)
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


def layout_mistake(style: str, out: object, shape: tuple) -> str | None:
    """A name for an output of the wrong shape that is the right one in (B, H, L, Ev): left in
    FlexAttention's layout by a kernel that takes FlashAttention's interface."""
    found = tuple(getattr(out, "shape", ()))
    if style not in INTERFACE or found != tuple(shape) or found == kernel_shape(style, shape):
        return None
    return (
        f"output left in (batch, nheads, seqlen, headdim) {found}: {style}_func returns "
        f"{layout_words(style)} (transpose it back)"
    )


__all__ = ["Variant", "VariantBackward"]
