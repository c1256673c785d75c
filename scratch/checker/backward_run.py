"""The backward kind of case (scratch.check_backward, run.py): compare dq, dk, dv with the
ground truth, name the mistake when it fails.

The rule (per gradient, FlashAttention's practice with the forward checker's lesson): the
kernel's max error may be at most twice the largest max error of the correct reference backward
kernels in the same dtype (backward_reference.py) plus 4 ulps of the gradient's largest entry.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from scratch.bounds.tolerance import UNIT_ROUNDOFF, RuleResult
from scratch.checker.arrays import Arrays
from scratch.checker.backward_diagnosis import diagnose, diagnose_shapes
from scratch.checker.backward_reference import reference_grads, rounding_scale
from scratch.checker.blas import own_work
from scratch.checker.prepare import BackwardPrepared
from scratch.checker.reference import max_error
from scratch.checker.report import CaseResult
from scratch.checker.run import (
    RULE_FACTOR,
    BadResult,
    Kind,
    allowed_error,
    changed_in_place,
    target_name,
)

GRADIENTS = ("dq", "dk", "dv")


class Backward(Kind):
    """backward(q, k, v, grad_output, attn_mask=..., ..., dropout_mask=...) -> (dq, dk, dv)."""

    def needs(self, case) -> dict[str, bool]:
        """The keywords fn must take before the case is made at all."""
        return {"enable_gqa": case.gqa, "dropout_mask": bool(case.dropout_p)}

    def call(self, args: tuple, kwargs: dict) -> tuple:
        """(dq, dk, dv) as float64 arrays."""
        return read_gradients(self.fn(*args, **kwargs), self.arrays)

    def judge(self, result, prep: BackwardPrepared, args, kwargs, got) -> CaseResult:
        """Compare each gradient with the ground truth's; diagnose a failure."""
        arrays, masked_rows = self.arrays, self.masked_rows
        changed = prep.mutated(arrays, args, kwargs)
        shapes = tuple(g.shape for g in got)
        want = tuple(t.shape for t in prep.truth)
        if shapes != want:
            result.message = f"gradient shapes {shapes}, expected {want} (dq, dk, dv)"
            result.diagnosis = diagnose_shapes(prep, shapes)
            return result
        with own_work():  # the reference backward kernels
            refs, allowed, element = allowances(prep, masked_rows)
        errors = [max_error(g, t) for g, t in zip(got, prep.truth)]
        ratios = [
            e / a if a > 0 else (0.0 if e == 0 else math.inf) for e, a in zip(errors, allowed)
        ]
        # an element within its own rounding allowance is not a failure (backward_reference.py)
        ok = [
            r <= 1.0 or within(g, t, a, e)
            for r, g, t, a, e in zip(ratios, got, prep.truth, allowed, element)
        ]
        bad = [i for i in range(3) if not ok[i]]
        n = max(bad or range(3), key=lambda i: ratios[i])
        result.max_error, result.bound, result.ratio = errors[n], allowed[n], ratios[n]
        result.rule = RuleResult(not bad, errors[n], refs[n], allowed[n])
        with np.errstate(invalid="ignore"):
            result.diff = np.abs(got[0] - prep.truth[0]).tolist()  # dq, for a heatmap
        if result.rule.ok and not changed:
            result.status = "pass"
            rounding = [GRADIENTS[i] for i in range(3) if ratios[i] > 1.0]
            if rounding:  # say why an error above the allowance passed
                result.message = (
                    f"{', '.join(rounding)} above the allowance but within every element's "
                    f"rounding allowance (tiny gradients)"
                )
            return result
        if changed:
            return changed_in_place(result, changed)
        result.message = "; ".join(
            f"{GRADIENTS[i]} error {errors[i]:.3g} > {allowed[i]:.3g} ({RULE_FACTOR:g}x the "
            f"worst reference {result.dtype} backward's {refs[i]:.3g} + floor)"
            if math.isfinite(errors[i])
            else f"{GRADIENTS[i]} NaN or inf where the ground truth has a number (or the reverse)"
            for i in bad
        )
        result.diagnosis = _behaviour(self.fn, prep, arrays, got, allowed)
        if result.diagnosis is None:
            with own_work():  # the known mistakes' gradients
                result.diagnosis = diagnose(prep, got, tuple(allowed), masked_rows)
        return result


def backward_kernel(fn, backward, array: str) -> tuple[Callable, str]:
    """The function that returns (dq, dk, dv), and the report's name for it."""
    if backward is not None:
        return backward, target_name(backward) + (f" (backward of {target_name(fn)})" if fn else "")
    if array == "torch":
        return autograd_backward(fn), f"torch.autograd.grad through {target_name(fn)}"
    return fn, target_name(fn)


def autograd_backward(forward: Callable) -> Callable:
    """A backward made of a torch forward: torch.autograd.grad(output, (q, k, v), grad_output)."""
    import torch

    def backward(q, k, v, grad_output, **kwargs):
        q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        out = forward(q, k, v, **kwargs)
        if isinstance(out, tuple):  # (output, weights)
            out = out[0]
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            raise BadResult("fn's output is not a tensor that autograd can differentiate")
        grads = torch.autograd.grad(out, (q, k, v), grad_output, allow_unused=True)
        return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, (q, k, v)))

    return backward


def read_gradients(result: object, arrays: Arrays) -> tuple[np.ndarray, ...]:
    """(dq, dk, dv) as float64 arrays; BadResult for anything else."""
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        kind = (
            f"{len(result)} items" if isinstance(result, (tuple, list)) else type(result).__name__
        )
        raise BadResult(f"fn returned {kind}; expected (dq, dk, dv)")
    try:
        return tuple(np.asarray(arrays.floats(g), dtype=np.float64) for g in result)
    except (TypeError, ValueError, AttributeError) as exc:
        raise BadResult(f"fn's gradients are not arrays of numbers: {exc}") from None


def allowances(prep: BackwardPrepared, masked_rows: str) -> tuple[list, list, tuple]:
    """Per gradient: the largest reference kernel error, the allowed max error, and each
    element's rounding allowance (its error may reach this instead)."""

    def make() -> tuple[list, list, tuple]:
        refs = reference_grads(prep, masked_rows)
        worst, allowed = [], []
        for n, t in enumerate(prep.truth):
            ref = max(max_error(r[n], t) for r in refs)
            ref = ref if math.isfinite(ref) else 0.0
            finite = np.abs(t[np.isfinite(t)])
            top = float(finite.max()) if finite.size else 0.0
            worst.append(ref)
            allowed.append(allowed_error(ref, top, prep.dtype))
        case = prep.case
        terms = case.q[-1] + case.v[-1] + case.k[-2]  # the longest chain of sums: E + Ev + S
        share = terms * UNIT_ROUNDOFF[prep.dtype]
        scales = rounding_scale(prep.problem, prep.grad_output, prep.factors)
        return worst, allowed, tuple(share * s for s in scales)

    return prep.memo(f"allowed:{masked_rows}", make)


def within(got: np.ndarray, truth: np.ndarray, allowed: float, element: np.ndarray) -> bool:
    """Every element within the allowed max error or its own rounding allowance (NaN on NaN)."""
    with np.errstate(invalid="ignore"):
        nan = np.isnan(got) | np.isnan(truth)
        if np.any(np.isnan(got) != np.isnan(truth)):
            return False
        diff = np.abs(got - truth)[~nan]
    return bool(np.all(np.isfinite(diff)) and np.all((diff <= allowed) | (diff <= element[~nan])))


def _behaviour(kernel, prep: BackwardPrepared, arrays: Arrays, got: tuple, allowed: list):
    """Two identical calls that differ by more than rounding: a fresh random draw per call."""
    args, kwargs = prep.call_args(arrays)
    try:
        again = read_gradients(kernel(*args, **kwargs), arrays)
    except Exception:
        return None
    if all(max_error(a, g) <= 4 * max(al, 1e-300) for a, g, al in zip(again, got, allowed)):
        return None
    if prep.case.dropout_p:
        return (
            "dropout mask not reused: two identical calls differ (a fresh mask drawn in the "
            "backward instead of the forward's dropout_mask)"
        )
    return "two identical calls differ by more than rounding (random numbers in the backward?)"


__all__ = ["Backward", "backward_kernel"]
