"""check_variants_backward: a variant kernel's gradients against scratch.flex_attention_backward.

backward(q, k, v, grad_output, **keywords) -> (dq, dk, dv), or (dq, dk, dv, dsinks) in cases
with sinks; the keywords as check_variants gives them (either style). The truth is
scratch.flex_attention_backward on the rounded inputs (RoPE's gradients turned back with
scratch.rotary_backward); each gradient passes under the forward's rule, with two correct
reference backwards in the checked dtype (D from rowsum(dO * O) and from rowsum(P * dP)).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from ..flex_backward import flex_attention_backward
from ..rope import rotary_backward
from ..tolerance import UNIT_ROUNDOFF, ulp
from .arrays import Arrays
from .cases import gauss
from .diagnosis import structural_score
from .report import CheckReport
from .run import (
    FLOOR_ULPS,
    RULE_FACTOR,
    accepted_keywords,
    finish,
    kernel_raised,
    run_all,
    target_name,
)
from .variant_cases import VariantCase, variant_cases
from .variant_diagnosis import mask_candidates, score_candidates
from .variant_numpy import Planted, allowed
from .variant_numpy_backward import GRADS, grads
from .variant_prepare import SANE, prepare_variant, rounded, truth_inputs
from .variant_run import start_variant_case, variant_settings

_CACHE: dict = {}
SOFTCAP_GRAD = (
    "softcap's backward misses its 1 - tanh^2(score / cap) factor (d cap tanh(s / cap) / ds)"
)
ROPE_GRAD = (
    "RoPE's backward missing: the gradients of the rotated q and k returned, not turned back by "
    "-angle to the unrotated inputs"
)


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


def prepare_backward(case: VariantCase, dtype: str, seed: int) -> dict:
    """grad_output, the true gradients, and each gradient's allowed error (cached)."""
    key = (case, dtype, seed)
    if key in _CACHE:
        return _CACHE[key]
    prep = prepare_variant(case, dtype, seed)
    rng = random.Random(f"{seed}:{case.name}:grad_output")
    d_out = rounded(gauss(rng, case.q[:3] + (case.v[3],)), dtype)
    truth = truth_grads(case, prep, d_out)
    refs = [grads(case, prep.data, d_out, dtype=dtype, d_from_output=f) for f in (True, False)]
    allowed_err, reference = [], []
    u, n = UNIT_ROUNDOFF[dtype], case.q[3] + case.k[2]
    for g, t in enumerate(truth):
        r = max(float(np.max(np.abs(ref[g] - t))) for ref in refs)
        top = float(np.max(np.abs(t)))
        if not r <= SANE * n * u * max(top, 1.0):
            raise RuntimeError(
                f"{case.name}: the reference backward is {r:.3g} from the true {GRADS[g]} "
                f"(more than rounding): the checker's own rule and truth disagree"
            )
        reference.append(r)
        # references that happen to agree closely leave only the ulp floor; a correct kernel
        # summing the n = E + S terms of a gradient in another order may differ by about n
        # roundings of the largest entry (seen in float64: 4 false alarms over seeds 20-199)
        floor = max(FLOOR_ULPS * ulp(top, dtype), n * u * top)
        allowed_err.append(RULE_FACTOR * r + floor)
    made = {"prep": prep, "d_out": d_out, "truth": truth, "allowed": allowed_err, "memo": {}}
    if len(_CACHE) > 128:
        _CACHE.clear()
    _CACHE[key] = made
    return made


def check_variants_backward(
    backward: Callable,
    *,
    variant_style: str | None = None,
    array: str = "numpy",
    dtype: object = "float32",
    device: object = None,
    seed: int = 0,
    require: object = (),
    progress: Callable[[int, int, str], None] | None = None,
) -> CheckReport:
    """Run backward on the variant cases and compare its gradients with the exact ones."""
    style, dtype, required, arrays = variant_settings(
        backward, "backward", variant_style, array, dtype, device, seed, require
    )
    settings = f"backward, variant_style={style}, array={array}, dtype={dtype}, seed={seed}"
    report = CheckReport(target_name(backward), settings)
    accepts = accepted_keywords(backward)
    run_all(
        report,
        variant_cases(dtype),
        progress,
        lambda c: run_case(backward, c, arrays, dtype, seed, style, accepts),
    )
    return finish(report, required)


def run_case(fn, case, arrays: Arrays, dtype: str, seed: int, style: str, accepts):
    """One case: call the backward, compare each gradient, diagnose."""
    made = prepare_backward(case, dtype, seed)
    prep = made["prep"]
    result, kw = start_variant_case(case, prep, arrays, dtype, style, accepts)
    if kw is None:
        return result
    d = prep.data
    args = tuple(arrays.make(x.tolist(), dtype) for x in (d.q, d.k, d.v, made["d_out"]))
    try:
        found = fn(*args, **kw)
    except Exception as exc:  # the kernel's own error: a failure, or NotImplementedError
        return kernel_raised(result, exc, arrays.array, fn, kw)
    try:
        got = [np.asarray(arrays.floats(g), dtype=np.float64) for g in found]
    except (TypeError, ValueError, AttributeError) as exc:  # None, a string, ragged lists...
        result.message = f"fn's gradients are not arrays of numbers: {type(found).__name__} ({exc})"
        return result
    truth, allowed_err = made["truth"], made["allowed"]
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


def backward_candidates(case: VariantCase, masked: bool) -> list[tuple[str, Planted]]:
    """The forward's mask and score mistakes (in P's recompute) and the backward's own."""
    found = mask_candidates(case) + score_candidates(case, masked)
    if case.softcap is not None:
        found.append((SOFTCAP_GRAD, Planted(softcap_grad=False)))
    if case.rotary is not None:
        found.append((ROPE_GRAD, Planted(rope_grad=False)))
    return found


def diagnose_backward(made: dict, got: list[np.ndarray]) -> str | None:
    """The one planted mistake whose dq, dk, dv got matches, or None (dsinks not compared: a
    kernel that leaves the sink out of lse still reports some dsinks of its own)."""
    prep = made["prep"]
    case = prep.case
    flat = lambda gs: np.concatenate([g.ravel() for g in gs[:3]])  # noqa: E731
    truth = flat(made["truth"])
    bound = flat([np.full(t.shape, a) for t, a in zip(made["truth"], made["allowed"])])
    if "outputs" not in made["memo"]:
        masked = not allowed(case, Planted(), case.q[2], case.k[2]).all()
        made["memo"]["outputs"] = [
            (name, flat(grads(case, prep.data, made["d_out"], planted)))
            for name, planted in backward_candidates(case, masked)
        ]
    g = flat(got)
    matched = {
        n for n, out in made["memo"]["outputs"] if structural_score(g, out, truth, bound) <= 2
    }
    return matched.pop() if len(matched) == 1 else None


__all__ = ["check_variants_backward"]
