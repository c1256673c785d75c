"""scratch.check_backward: run a backward kernel on seeded cases, compare dq, dk, dv with the
ground truth, name the mistake when it fails. The report is the forward checker's CheckReport.

The rule (per gradient, FlashAttention's practice with the forward checker's lesson): the
kernel's max error may be at most twice the largest max error of the correct reference backward
kernels in the same dtype (backward_reference.py) plus 4 ulps of the gradient's largest entry.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..tolerance import UNIT_ROUNDOFF, RuleResult, ulp
from .arrays import Arrays
from .backward_cases import (
    BACKWARD_FEATURES,
    BackwardPrepared,
    backward_cases,
    prepare_backward,
)
from .backward_diagnosis import diagnose, diagnose_shapes
from .backward_reference import max_error, reference_grads, rounding_scale
from .blas import own_work
from .report import CheckReport
from .run import (
    FLOOR_ULPS,
    RULE_FACTOR,
    accepted_keywords,
    changed_in_place,
    check_require,
    check_settings,
    finish,
    kernel_raised,
    made_inputs,
    not_taken,
    run_all,
    settings_line,
    start_case,
    target_name,
)

BACKWARD_ARRAYS = ("numpy", "torch")
BACKWARD_CASE_SETS = ("standard",)
GRADIENTS = ("dq", "dk", "dv")


class BadGradients(Exception):
    """fn returned something that is not (dq, dk, dv)."""


def check_backward(
    fn: Callable | None,
    *,
    array: str = "numpy",
    dtype: object = "float32",
    device: object = None,
    cases: str = "standard",
    seed: int = 0,
    backward: Callable | None = None,
    masked_rows: str = "zero",
    require: object = (),
    progress: Callable[[int, int, str], None] | None = None,
) -> CheckReport:
    """Run a backward kernel on seeded cases and compare dq, dk, dv with the float64 ground truth.

    The kernel checked is `backward` when given (fn is then the forward it belongs to, named in
    the report, or None); else with array='torch' fn is a forward function differentiated by
    torch.autograd.grad with the case's seeded dO, and with array='numpy' fn is the backward.
    A backward is called as backward(q, k, v, grad_output, attn_mask=..., is_causal=...,
    scale=..., enable_gqa=..., dropout_p=..., dropout_mask=...) with only the keywords a case
    needs (dropout_mask: the forward's kept entries, True = kept) and returns (dq, dk, dv).
    """
    if backward is not None and not callable(backward):
        raise TypeError(f"backward: expected a callable, found {type(backward).__name__}")
    if fn is not None and not callable(fn):
        raise TypeError(f"fn: expected a callable attention function, found {type(fn).__name__}")
    if fn is None and backward is None:
        raise TypeError("fn: expected a function (or backward=), found None")
    dtype, masked_rows = check_settings(
        array, BACKWARD_ARRAYS, cases, BACKWARD_CASE_SETS, seed, device, dtype, masked_rows
    )
    required = check_require(require, BACKWARD_FEATURES)
    arrays = Arrays(array, device)
    arrays.check_device()
    kernel, target = _kernel(fn, backward, array)
    settings = (
        f"backward, array={array}, dtype={dtype}, device={device or 'default'}, cases={cases}"
    )
    report = CheckReport(target, settings_line(settings, seed, masked_rows, required))
    accepts = accepted_keywords(kernel)
    run_all(
        report,
        backward_cases(dtype),
        progress,
        lambda c: run_case(kernel, c, arrays, dtype, seed, masked_rows, accepts),
    )
    return finish(report, required)


def _kernel(fn, backward, array: str) -> tuple[Callable, str]:
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
            raise BadGradients("fn's output is not a tensor that autograd can differentiate")
        grads = torch.autograd.grad(out, (q, k, v), grad_output, allow_unused=True)
        return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, (q, k, v)))

    return backward


def read_gradients(result: object, arrays: Arrays) -> tuple[np.ndarray, ...]:
    """(dq, dk, dv) as float64 arrays; BadGradients for anything else."""
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        kind = (
            f"{len(result)} items" if isinstance(result, (tuple, list)) else type(result).__name__
        )
        raise BadGradients(f"fn returned {kind}; expected (dq, dk, dv)")
    try:
        return tuple(np.asarray(arrays.floats(g), dtype=np.float64) for g in result)
    except (TypeError, ValueError, AttributeError) as exc:
        raise BadGradients(f"fn's gradients are not arrays of numbers: {exc}") from None


def _mutated(arrays: Arrays, prep: BackwardPrepared, args: tuple, kwargs: dict) -> list[str]:
    """The inputs fn changed in place."""
    *masters, mask, keep = prep.masters(arrays)
    names = [
        name
        for name, got, master in zip(("query", "key", "value", "grad_output"), args, masters)
        if not arrays.same(got, master)
    ]
    for word, master in (("attn_mask", mask), ("dropout_mask", keep)):
        if master is not None and not arrays.same(kwargs[word], master):
            names.append(word)
    return names


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
            allowed.append(RULE_FACTOR * ref + FLOOR_ULPS * ulp(top, prep.dtype))
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


def run_case(kernel, case, arrays: Arrays, dtype: str, seed: int, masked_rows: str, accepts):
    """Run one case: call the kernel, compare each gradient, diagnose a failure."""
    needs = {"enable_gqa": case.gqa, "dropout_mask": bool(case.dropout_p)}
    result = start_case(case, dtype, needs, accepts)
    if result.status == "unsupported":
        return result
    cdtype = result.dtype
    with own_work():  # the inputs and the ground truth's gradients
        made = made_inputs(
            result, lambda: prepare_backward(case, arrays, cdtype, seed, masked_rows), arrays
        )
    if made is None:
        return result
    prep, args, kwargs = made
    if not_taken(result, kwargs, accepts):
        return result
    try:
        got = read_gradients(kernel(*args, **kwargs), arrays)
    except BadGradients as exc:
        result.message = str(exc)
        return result
    except Exception as exc:  # the kernel's own error: a failure, or NotImplementedError
        return kernel_raised(result, exc, arrays.array, kernel, kwargs)
    changed = _mutated(arrays, prep, args, kwargs)
    shapes = tuple(g.shape for g in got)
    want = tuple(t.shape for t in prep.truth)
    if shapes != want:
        result.message = f"gradient shapes {shapes}, expected {want} (dq, dk, dv)"
        result.diagnosis = diagnose_shapes(prep, shapes)
        return result
    with own_work():  # the reference backward kernels
        refs, allowed, element = allowances(prep, masked_rows)
    errors = [max_error(g, t) for g, t in zip(got, prep.truth)]
    ratios = [e / a if a > 0 else (0.0 if e == 0 else math.inf) for e, a in zip(errors, allowed)]
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
                f"{', '.join(rounding)} above the allowance but within every element's rounding "
                f"allowance (tiny gradients)"
            )
        return result
    if changed:
        return changed_in_place(result, changed)
    result.message = "; ".join(
        f"{GRADIENTS[i]} error {errors[i]:.3g} > {allowed[i]:.3g} ({RULE_FACTOR:g}x the worst "
        f"reference {cdtype} backward's {refs[i]:.3g} + floor)"
        if math.isfinite(errors[i])
        else f"{GRADIENTS[i]} NaN or inf where the ground truth has a number (or the reverse)"
        for i in bad
    )
    result.diagnosis = _behaviour(kernel, prep, arrays, got, allowed)
    if result.diagnosis is None:
        with own_work():  # the known mistakes' gradients
            result.diagnosis = diagnose(prep, got, tuple(allowed), masked_rows)
    return result


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
