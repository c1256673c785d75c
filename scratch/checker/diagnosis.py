"""Name a failing kernel's mistake - only when its output lands on a known wrong attention.

Three kinds of evidence, never the size of the error alone:
1. structure: the output matches a deliberately wrong attention (variants.py) to within that
   variant's own bound, while the variant is far from the truth (`structural`);
2. precision: the error points the same way as a narrower computation's error and has its size
   (cosine >= 0.8, norm ratio 1/2..2) (`precision`);
3. behaviour: a second call on fresh copies differs by more than rounding (dropout), returned
   weights are p zeroed and rescaled (dropout), or the inputs changed (in-place mutation).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..tolerance import ACCUMULATE, UNIT_ROUNDOFF
from . import variants as var
from .reference import causal

DTYPE_16 = ("float16", "bfloat16")


def candidates(case, p, masked_rows: str, rows: np.ndarray | None) -> list[tuple[str, object]]:
    """(mistake, () -> output) for every structural mistake this case can reveal."""
    E, L, S, Ev = case.q[-1], p.q.shape[-2], case.k[-2], case.v[-1]
    d = 1.0 / math.sqrt(E)
    attend = functools.partial(var.attend, p, policy=masked_rows)
    found = [
        ("missing scale: scores not multiplied by 1/sqrt(d)", lambda: attend(scale=1.0)),
        ("scale 1/d instead of 1/sqrt(d)", lambda: attend(scale=1.0 / E)),
    ]
    if not case.rows:
        found.append(
            ("softmax over the wrong axis (over queries, not keys)", lambda: attend(axis=-2))
        )
    if case.scale is not None:
        found.append(("the scale argument is ignored (1/sqrt(d) used)", lambda: attend(scale=d)))
    if E == S:
        found.append(
            (
                "q @ k without the transpose (q @ k instead of q @ k^T)",
                lambda: attend(transpose=False),
            )
        )
    if E == Ev:
        found.append(("k read where v belongs (weights @ k)", lambda: attend(read_k_as_v=True)))
    if case.mask in ("bool", "empty-row"):
        found.append(
            ("mask convention inverted (True taken as masked)", lambda: attend(allowed=~p.allowed))
        )
    if case.mask == "float":
        found.append(
            ("mask added before scaling ((scores + mask) * scale)", lambda: attend(mask_first=True))
        )
    if case.is_causal:
        shifts = [
            (-1, "causal mask off by one (diagonal excluded: j < i)"),
            (1, "causal mask off by one (one future key allowed: j <= i + 1)"),
        ]
        if L != S and not case.rows:
            shifts.append((S - L, "bottom-right causal alignment instead of top-left (PyTorch's)"))
        Lq = case.q[-2]
        for shift, name in shifts:
            found.append((name, lambda s=shift: attend(allowed=causal(Lq, S, s, rows))))
        found.append(
            (
                "causal mask inverted (attends to later keys: j >= i)",
                lambda: attend(allowed=~causal(Lq, S, -1, rows)),
            )
        )
    if case.gqa:
        found.append(
            (
                "grouped-query heads mapped as h % Hkv instead of h // (Hq / Hkv)",
                lambda: attend(interleave=True),
            )
        )
    if case.mask == "empty-row":
        for policy in ("zero", "nan", "uniform"):
            if policy != masked_rows:
                found.append(
                    (
                        f"fully masked rows give masked_rows={policy!r} results, not "
                        f"{masked_rows!r}; if that is your kernel's policy, check with "
                        f"masked_rows={policy!r} (--masked-rows {policy})",
                        lambda policy=policy: var.attend(p, policy=policy),
                    )
                )
    return found + var.tiled_mistakes(p)


def precision_candidates(p, dtype: str) -> list[tuple[str, object]]:
    """(finding, () -> output) for computations narrower than the dtype's bound assumes."""
    found = []
    acc = ACCUMULATE[dtype]
    for narrow in ("float32", "float16", "bfloat16"):
        if UNIT_ROUNDOFF[narrow] <= UNIT_ROUNDOFF[acc]:
            continue
        if narrow in DTYPE_16 and dtype in DTYPE_16:
            if narrow == dtype:
                what = (
                    f"16-bit accumulation: q @ k^T summed in {narrow}; the bound assumes float32 "
                    f"sums with {dtype} storage (PyTorch's policy)"
                )
                found.append((what, lambda n=narrow: var.attend(p, narrow=("scores summed", n))))
            continue
        if narrow == "float16":
            found.append(
                (
                    "lower precision: scores q @ k^T computed in float16",
                    lambda: var.attend(p, narrow=("scores computed", "float16")),
                )
            )
        for stage in ("inputs", "scores", "weights", "output"):
            found.append(
                (
                    f"lower precision: matches float64 attention with the {stage} rounded to "
                    f"{narrow} (an intermediate cast to {narrow}?)",
                    lambda st=stage, n=narrow: var.attend(p, narrow=(st, n)),
                )
            )
    return found


def structural_score(got, variant, truth, bound) -> float:
    """max |got - variant| / max(bound, 1e-3 |variant - truth|): <= 2 is a match.

    Requires the variant to be told apart from the truth (somewhere > 4 bounds away) and NaN
    where the variant has NaN."""
    if variant.shape != got.shape:
        return math.inf
    with np.errstate(all="ignore"):
        vn, gn = np.isnan(variant), np.isnan(got)
        if np.any(vn != gn):
            return math.inf
        both = ~vn
        far = np.abs(variant - truth)
        tell = np.where(np.isnan(truth) | ~both, 0.0, far / np.maximum(bound, 1e-300))
        if not np.any(tell[both] > 4.0) and np.array_equal(vn, np.isnan(truth)):
            return math.inf  # this case cannot reveal this mistake
        err = np.abs(got - variant)[both]
        allowed = np.maximum(bound, 1e-3 * np.where(np.isfinite(far), far, 0.0))[both]
        if not np.all(np.isfinite(err)):
            same_inf = np.all((got[both] == variant[both]) | np.isfinite(err))
            if not same_inf:
                return math.inf
            err = np.where(np.isfinite(err), err, 0.0)
        ratio = np.where(err == 0, 0.0, err / np.where(allowed > 0, allowed, 1e-300))
        return float(np.max(ratio)) if ratio.size else math.inf


def precision_match(got, variant, truth, live) -> bool:
    """The error points like the variant's error (cosine >= 0.8) and has its size (1/2..2)."""
    with np.errstate(all="ignore"):
        a = (got - truth)[live].ravel()
        b = (variant - truth)[live].ravel()
    if a.size == 0 or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return False
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return False
    return float(a @ b) / (na * nb) >= 0.8 and 0.5 <= na / nb <= 2.0


def diagnose(prep, got: np.ndarray, masked_rows: str, dtype: str) -> str | None:
    """The known mistake fn's output matches, or None."""
    truth, bound, live = prep.truth_np, prep.bound_np, prep.live_np
    if prep.case.q_size != 1.0 and not np.all(np.isfinite(got[live])):
        if np.all(np.isfinite(truth[live])):
            return "exp overflows on large logits: subtract the row max before exp"
    best, best_score = None, math.inf
    for name, make in prep.variant_outputs("structure", masked_rows):
        score = structural_score(got, make, truth, bound)
        if score < best_score:
            best, best_score = name, score
    if best is not None and best_score <= 2.0:
        return best
    for name, out in prep.variant_outputs("precision", masked_rows):
        if precision_match(got, out, truth, live):
            return name
    return None
