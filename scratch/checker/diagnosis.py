"""Name a failing kernel's mistake - only when its output lands on a known wrong attention.

Three kinds of evidence, never the size of the error alone:
1. structure: the output matches a deliberately wrong attention (variants.py) to within that
   variant's own bound, while the variant is far from the truth (`structural`);
2. precision: the error is a narrower computation's error to within a quarter of its size (so
   both its size and its sign pattern), never on nearly one-hot rows (`precision`); an epsilon
   in the softmax denominator is fitted the same way (`denominator_epsilon`);
3. behaviour: a second call on fresh copies differs by more than rounding (dropout), returned
   weights are p zeroed and rescaled (dropout), or the inputs changed (in-place mutation).
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np

from scratch.bounds.tolerance import ACCUMULATE, UNIT_ROUNDOFF
from scratch.checker import ignored
from scratch.checker import variants as var
from scratch.checker.mistake import Mistake, call, matches, one, outputs, precision_score
from scratch.checker.reference import LOG2E, Problem, causal, scores
from scratch.variants.causal import at_or_before

GQA_MODULO = "grouped-query heads mapped as h % Hkv instead of h // (Hq / Hkv)"

DTYPE_16 = ("float16", "bfloat16")


def candidates(case, p, masked_rows: str, rows: np.ndarray | None) -> list[Mistake]:
    """(mistake, () -> output) for every structural mistake this case can reveal."""
    E, L, S, Ev = case.q[-1], p.q.shape[-2], case.k[-2], case.v[-1]
    d = 1.0 / math.sqrt(E)
    attend = functools.partial(var.attend, p, policy=masked_rows)
    found = [
        Mistake("missing scale: scores not multiplied by 1/sqrt(d)", lambda: attend(scale=1.0)),
        Mistake("scale 1/d instead of 1/sqrt(d)", lambda: attend(scale=1.0 / E)),
    ]
    if not case.rows:
        found.append(
            Mistake("softmax over the wrong axis (over queries, not keys)", lambda: attend(axis=-2))
        )
    if case.scale is not None:
        found.append(Mistake(ignored.SCALE, lambda: attend(scale=d)))
    if case.mask != "none":  # no case has a mask and is_causal both
        unmasked = replace(p, allowed=None, add=None)
        found.append(Mistake(ignored.ATTN_MASK, lambda: var.attend(unmasked, policy=masked_rows)))
    if case.is_causal:
        found.append(Mistake(ignored.IS_CAUSAL, lambda: attend(allowed=None)))
    if E == S:
        found.append(
            Mistake(
                "q @ k without the transpose (q @ k instead of q @ k^T)",
                lambda: attend(transpose=False),
            )
        )
    if E == Ev:
        found.append(
            Mistake("k read where v belongs (weights @ k)", lambda: attend(read_k_as_v=True))
        )
    if case.mask in ("bool", "empty-row"):
        found.append(
            Mistake(
                "mask convention inverted (True taken as masked)",
                lambda: attend(allowed=~p.allowed),
            )
        )
    if case.mask == "float":
        found.append(
            Mistake(
                "mask added before scaling ((scores + mask) * scale)",
                lambda: attend(mask_first=True),
            )
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
            found.append(Mistake(name, lambda s=shift: attend(allowed=causal(Lq, S, s, rows))))
        found.append(
            Mistake(
                "causal mask inverted (attends to later keys: j >= i)",
                lambda: attend(allowed=~causal(Lq, S, -1, rows)),
            )
        )
    if case.gqa:
        found.append(
            Mistake(
                GQA_MODULO,
                lambda: attend(interleave=True),
            )
        )
    if case.mask == "empty-row":
        for policy in ("zero", "nan", "uniform"):
            if policy != masked_rows:
                found.append(
                    Mistake(
                        f"fully masked rows give masked_rows={policy!r} results, not "
                        f"{masked_rows!r}; if that is your kernel's policy, check with "
                        f"masked_rows={policy!r} (--masked-rows {policy})",
                        lambda policy=policy: var.attend(p, policy=policy),
                    )
                )
    return found + outside_mistakes(case, p, masked_rows, rows) + tiled_mistakes(p)


def outside_mistakes(case, p, masked_rows: str, rows) -> list[Mistake]:
    """Mistakes of kernels written outside the project: exp2 folds, tiles, layouts, masks."""
    E, L, S, Ev = case.q[-1], p.q.shape[-2], case.k[-2], case.v[-1]
    attend = functools.partial(var.attend, p, policy=masked_rows)
    found = [
        Mistake(
            "exp used where exp2 was meant: log2(e) folded into the scale, then exp (scores "
            "1.443x too large)",
            lambda: attend(stretch=LOG2E),
        ),
        Mistake(
            "exp2 used without folding log2(e) into the scale (scores 0.693x too small)",
            lambda: attend(stretch=1.0 / LOG2E),
        ),
        Mistake(
            "a natural-log lse used inside exp2: exp2(s log2(e) - lse) needs lse log2(e)",
            lambda: attend(lse_in_exp2=True),
        ),
        Mistake(
            "softmax denominator + 1 (sum of exp(s - m) + 1 instead of the sum)",
            lambda: attend(denominator=1.0),
        ),
        Mistake(
            "scale applied to v instead of the scores: softmax(q k^T) @ (scale v)",
            lambda: attend(scale=1.0) * p.scale,
        ),
    ]
    if case.scale is None and E != Ev:
        found.append(
            Mistake(
                "scale from the value width: 1/sqrt(Ev) instead of 1/sqrt(E) (E = q's last dim)",
                lambda: attend(scale=1.0 / math.sqrt(Ev)),
            )
        )
    if case.gqa:
        found.append(
            Mistake(
                "GQA head map wrong in the value read only: v read from head h % Hkv, k from "
                "h // (Hq / Hkv)",
                lambda: attend(v_interleave=True),
            )
        )
    if case.mask != "none" or case.is_causal:
        found.append(
            Mistake(
                "mask applied after the softmax (weights of the unmasked scores, then masked: "
                "rows no longer sum to 1)",
                lambda: attend(mask_after=True),
            )
        )
    if case.mask == "float" and L == S and not rows:
        found.append(
            Mistake(
                "float mask transposed (mask[j, i] added to the score of query i, key j)",
                lambda: attend(add_transposed=True, allowed=p.allowed.swapaxes(-1, -2)),
            )
        )
    if rows is None:
        truth = attend()
        ends = {L - L % b: b for b in reversed(BLOCKS) if L % b}  # same rows, one variant
        for b in ends.values():
            found.append(
                Mistake(
                    "last partial query block dropped (query rows past the last full block "
                    "left at zero)",
                    lambda b=b: np.where(np.arange(L)[:, None] < L - L % b, truth, 0.0),
                )
            )
        if case.is_causal:
            i, j = np.arange(L)[:, None], np.arange(S)[None, :]
            for b in (b for b in BLOCKS if b < S):
                found.append(
                    Mistake(
                        "causal tile skipping keeps only the diagonal tile (key tiles left of "
                        "the diagonal skipped)",
                        lambda b=b: attend(allowed=causal(L, S, 0) & (j // b == i // b)),
                    )
                )
            for b in (b for b in BLOCKS if b < L):  # else every row sees no key: no evidence
                for policy in dict.fromkeys((masked_rows, "nan")):  # 0 / 0 in the first tile
                    found.append(
                        Mistake(
                            DIAGONAL_SKIPPED,
                            lambda b=b, policy=policy: attend(
                                allowed=causal(L, S, 0) & at_or_before(j, i // b * b - 1),
                                policy=policy,
                            ),
                        )
                    )
    return found


BLOCKS = (8, 16, 32, 64, 128)
DIAGONAL_SKIPPED = (
    "causal tile bound stops before the query's own tile (the diagonal tile skipped: keys "
    "from the start of the query's tile on are never seen, and the first tile's rows see none)"
)


STALE = (
    "running max stale: exp(s - m) used the max from before this block (update m first, then "
    "exp(s - m_new))"
)
RESCALES = {  # reference.online's rescale mistake -> its name
    "none": "accumulator not rescaled when the running max grows (o += p @ v without "
    "o *= exp(m_old - m_new))",
    "inverted": "rescale factor inverted: exp(m_new - m_old) instead of exp(m_old - m_new)",
    "none-both": "neither the accumulator nor the denominator rescaled when the running max "
    "grows (o and l both need *= exp(m_old - m_new))",
    "chunk": "chunks combined without their max correction: neither the accumulator nor "
    "the denominator rescaled by exp(m_chunk - m_max)",
    "inverted-both": "rescale factor inverted in both the accumulator and the denominator: "
    "exp(m_new - m_old) instead of exp(m_old - m_new)",
    "stale": STALE,
    "stale-own": STALE,
    "none-sum": "denominator not rescaled when the running max grows (l += rowsum(p) "
    "without l *= exp(m_old - m_new))",
}
DROPPED = "last partial key block dropped (keys past the last full block ignored)"


def tiled_mistakes(p: Problem) -> list[Mistake]:
    """The block mistakes a one-pass kernel can make, per block size."""
    S = p.k.shape[-2]
    found, ends = [], set()
    for b in BLOCKS:
        if b < S:
            for mode, name in RESCALES.items():
                found.append(Mistake(name, lambda b=b, mode=mode: var.tiled(p, b, rescale=mode)))
        end = S - S % b
        if S % b and end not in ends:  # blocks with the same full part drop the same keys
            ends.add(end)
            found.append(Mistake(DROPPED, lambda b=b: var.tiled(p, b, drop_last=True)))
    return found


def precision_candidates(p, dtype: str) -> list[Mistake]:
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
                found.append(
                    Mistake(what, lambda n=narrow: var.attend(p, narrow=("scores summed", n)))
                )
            continue
        if narrow == "float16":
            found.append(
                Mistake(
                    "lower precision: scores q @ k^T summed in float16 (a float16 matmul)",
                    lambda: var.attend(p, narrow=("scores computed", "float16")),
                )
            )
        if narrow in DTYPE_16:
            found.append(
                Mistake(
                    f"lower precision: weights @ v computed in {narrow} (weights, v and the "
                    f"output rounded to {narrow})",
                    lambda n=narrow: var.attend(p, narrow=("weights @ v", n)),
                )
            )
            found.append(
                Mistake(
                    f"lower precision: scores q @ k^T summed in {narrow} term by term "
                    f"(16-bit accumulation)",
                    lambda n=narrow: var.attend(p, narrow=("scores accumulated", n)),
                )
            )
            for b in BLOCKS:
                found.append(
                    Mistake(
                        f"lower precision: accumulator stored in {narrow} between key blocks "
                        f"(keep o in float32)",
                        lambda b=b, n=narrow: var.tiled(p, b, store_acc=n),
                    )
                )
        for stage in ("inputs", "scores", "weights", "output"):
            found.append(
                Mistake(
                    f"lower precision: matches float64 attention with the {stage} rounded to "
                    f"{narrow} (an intermediate cast to {narrow}?)",
                    lambda st=stage, n=narrow: var.attend(p, narrow=(st, n)),
                )
            )
    return found


OVERFLOW = (
    "exp overflows on large logits: subtract the row max (the running max, this block "
    "included) before exp"
)


def overflows(prep, got: np.ndarray, dtype: str) -> bool:
    """inf/NaN where the truth is finite, in a case whose scores reach exp's overflow."""
    truth, live = prep.truth_np, prep.live_np
    if np.all(np.isfinite(got[live])) or not np.all(np.isfinite(truth[live])):
        return False
    p = prep.problem
    with np.errstate(all="ignore"):  # (..., L, S) scaled, masked, without the float mask
        top = np.max(scores(replace(p, add=None), p.q, p.heads()[0], np.float64))
    return bool(top > math.log(float(np.finfo(ACCUMULATE[dtype]).max)))


def diagnose(prep, got: np.ndarray, masked_rows: str, dtype: str) -> str | None:
    """The known mistake fn's output matches, or None (also when two mistakes match alike)."""
    truth, bound, live = prep.truth_np, prep.bound_np, prep.live_np
    if overflows(prep, got, dtype):
        return OVERFLOW
    structure = functools.partial(candidates, prep.case, prep.problem, masked_rows, prep.rows)
    made = outputs(prep._memo, ("structure", masked_rows), structure, call)
    matched = matches(got, made, truth, bound)
    if matched:  # two names for one output: this case cannot tell which (but see ignored.pick)
        return ignored.pick(matched)
    if prep.case.q_size != 1.0:  # nearly one-hot rows: any relative error looks alike
        return None
    precision = functools.partial(precision_candidates, prep.problem, prep.dtype)
    precise = outputs(prep._memo, ("precision", masked_rows), precision, call)
    found = matches(got, precise, truth, live, precision_score)
    if found:
        return one(found)
    return denominator_epsilon(prep, got) or float32_answer(prep, got, masked_rows)


def denominator_epsilon(prep, got: np.ndarray) -> str | None:
    """An epsilon added to the softmax denominator: got - truth = -truth * eps / l per row."""
    truth, live = prep.truth_np, prep.live_np
    p = prep.problem
    with np.errstate(all="ignore"):
        s = scores(p, p.q, p.heads()[0], np.float64)  # (..., L, S)
        top = np.max(s, axis=-1, keepdims=True)
        total = np.sum(np.exp(s - np.where(np.isfinite(top), top, 0)), axis=-1, keepdims=True)
        a = (got - truth)[live].ravel()
        b = (-truth / total)[live].ravel()
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) or not b @ b:
        return None
    eps = float(a @ b) / float(b @ b)
    left = float(np.linalg.norm(a - eps * b))
    uniform = relative_residual(a, truth[live].ravel())
    if uniform is None:
        return None
    if eps > 0 and left <= 0.1 * np.linalg.norm(a) and 3 * left <= uniform:
        return f"an epsilon added to the softmax denominator (l + eps, eps ~ {eps:.1g})"
    return None


def relative_residual(error: np.ndarray, truth: np.ndarray) -> float | None:
    """What is left of `error` (got - truth, flattened) after its best fit r * truth (a uniform
    relative error); None where either is not finite, or truth is all zero."""
    if not np.all(np.isfinite(error)) or not np.all(np.isfinite(truth)) or not truth @ truth:
        return None
    return float(np.linalg.norm(error - (float(error @ truth) / float(truth @ truth)) * truth))


FLOAT32 = (
    "computed in float32: this float64 case's output is a right float32 answer (the attention "
    "of its inputs rounded to float32, within the float32 rule), not a float64 one: a float32 "
    "accumulator or cast, or a float64 value passed where float32 is taken (Triton passes a "
    "Python float argument, such as sm_scale, as float32)"
)


def float32_answer(prep, got: np.ndarray, masked_rows: str) -> str | None:
    """FLOAT32 when a float64 case's output passes the float32 rule on the inputs rounded to
    float32: within 2x the worst float32 reference kernel (+ 4 ulps) of their float64 attention."""
    if prep.dtype != "float64":
        return None
    from scratch.checker.reference import kernel_errors, store
    from scratch.checker.run import allowed_error

    p, live = prep.problem, prep.live_np
    p32 = replace(
        p,
        q=store(p.q, "float32"),
        k=store(p.k, "float32"),
        v=store(p.v, "float32"),
        add=None if p.add is None else store(p.add, "float32"),
    )
    truth32 = var.attend(p32, policy=masked_rows)  # float64 math on the float32 inputs
    with np.errstate(all="ignore"):
        err = np.abs(got - truth32)[live]
    if err.size == 0 or not np.all(np.isfinite(err)):
        return None
    reference = max(kernel_errors(p32, "float32", truth32, live))
    top = float(np.max(np.abs(truth32[live])))
    if float(np.max(err)) > allowed_error(reference, top, "float32"):
        return None
    # float32 rounding is not a uniform scale: an output off by one factor everywhere
    # (got = truth * (1 + r)) is some other slip, whatever its size
    with np.errstate(all="ignore"):
        error = (got - prep.truth_np)[live].ravel()
    residual = relative_residual(error, prep.truth_np[live].ravel())
    return None if residual is None or residual <= 0.1 * np.linalg.norm(error) else FLOAT32
