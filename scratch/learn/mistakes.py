"""The classic attention mistakes, planted: as kernels the checker can run, and on one example.

Each mistake is one of the checker's own wrong attentions (scratch/checker/variants.py, NumPy,
float64), so what the gallery shows is exactly what the checker's diagnosis compares against.
`kernel(name)` is a PyTorch-shaped attention function with that mistake (for scratch.check);
`plant(name, q, k, v, ...)` computes the right and the wrong weights and output of one example.
Needs NumPy (`import scratch` does not import this module).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from scratch.checker import variants
from scratch.checker.mistake import Mistake
from scratch.checker.reference import Problem, causal, scores

LARGE = 100.0  # the no-max mistake is shown with q times this (the checker's large-logits case)


def _off_by_one(p: Problem, is_causal: bool) -> dict:
    """The causal rule j < i (the diagonal dropped) where j <= i was meant."""
    L, S = p.q.shape[-2], p.k.shape[-2]
    return {"allowed": causal(L, S, -1)} if is_causal else {}


MISTAKES = (  # each plant: (problem, is_causal) -> variants.attend's keywords
    Mistake("no scale", lambda p, c: {"scale": 1.0}, "scores = q @ k.T  # * scale forgotten"),
    Mistake(
        "softmax over the wrong axis",
        lambda p, c: {"axis": -2},
        "weights = softmax(masked, axis=0)",
    ),
    Mistake("no transpose", lambda p, c: {"transpose": False}, "scores = q @ k  # k.T meant"),
    Mistake("causal off by one", _off_by_one, "allowed = j < i  # j <= i meant", needs="causal"),
    Mistake(
        "mask applied after softmax",
        lambda p, c: {"mask_after": True},
        "weights = softmax(scaled) * allowed",
        needs="mask",
    ),
    # no plant: shown with q times LARGE in float32, where exp overflows (no_max_attention)
    Mistake("no max subtraction", None, "e = exp(masked)  # exp(masked - max) meant"),
    Mistake("k used as v", lambda p, c: {"read_k_as_v": True}, "output = weights @ k  # v meant"),
)
NAMES = tuple(m.name for m in MISTAKES)


def mistake(name: str) -> Mistake:
    """The mistake called `name`; ValueError naming the known ones."""
    for m in MISTAKES:
        if m.name == name:
            return m
    raise ValueError(f"name: expected one of {', '.join(NAMES)}, found {name!r}")


def problem(q, k, v, scale: float | None, allowed=None, add=None, gqa: bool = False) -> Problem:
    """A float64 Problem from arrays or nested lists (scale None: 1/sqrt(E))."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    allowed = None if allowed is None else np.asarray(allowed, dtype=bool)
    return Problem(q, k, v, scale, allowed, add, gqa)


def no_max_attention(p: Problem, dtype: str = "float32") -> np.ndarray:
    """softmax without the max subtracted, in `dtype`: exp overflows to inf, inf / inf = nan."""
    k, v = p.heads()
    t = np.dtype(dtype).type
    with np.errstate(all="ignore"):
        s = scores(p, p.q.astype(t), k.astype(t), t)  # (..., L, E) @ (..., E, S) -> (..., L, S)
        e = np.exp(s)  # no max subtracted: inf once a score passes log(max of dtype)
        w = e / np.sum(e, axis=-1, keepdims=True)
        return (w @ v.astype(t)).astype(np.float64)  # (..., L, S) @ (..., S, Ev)


def attend(m: Mistake, p: Problem, is_causal: bool, dtype: str = "float32") -> np.ndarray:
    """The output of `p` with mistake `m` planted (float64; the no-max mistake in `dtype`)."""
    if m.plant is None:
        return no_max_attention(p, dtype)
    return variants.attend(p, **m.plant(p, is_causal))


def kernel(name: str) -> Callable:
    """attention(query, key, value, attn_mask=None, is_causal=False, scale=None,
    enable_gqa=False) with mistake `name`, in the input's dtype: for scratch.check."""
    m = mistake(name)

    def attention(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
        q = np.asarray(query)
        allowed, add = None, None
        if is_causal:
            allowed = causal(q.shape[-2], np.shape(key)[-2], 0)
        elif attn_mask is not None and np.asarray(attn_mask).dtype == bool:
            allowed = np.asarray(attn_mask)
        elif attn_mask is not None:  # a float mask: added; -inf entries are masked keys
            add = np.asarray(attn_mask, dtype=np.float64)
            allowed = np.isfinite(add)
            add = np.where(allowed, add, 0.0)
        p = problem(q, key, value, scale, allowed, add, enable_gqa)
        return attend(m, p, is_causal, q.dtype.name).astype(q.dtype)

    attention.__name__ = attention.__qualname__ = "planted_" + name.replace(" ", "_")
    return attention


@dataclass(frozen=True)
class Planted:
    """One example with one mistake: the right and wrong weights (L, S) and outputs (L, Ev)."""

    mistake: Mistake
    right_weights: np.ndarray | None
    wrong_weights: np.ndarray | None
    right_output: np.ndarray | None
    wrong_output: np.ndarray | None
    note: str  # how it was planted on this example (a mask assumed, logits grown)
    error: str  # why the wrong kernel cannot run here ("" when it runs)

    def difference(self) -> float:
        """max |wrong output - right output| (nan where the wrong one has nan or inf)."""
        if self.wrong_output is None or self.wrong_output.shape != self.right_output.shape:
            return math.nan
        with np.errstate(invalid="ignore"):
            return float(np.max(np.abs(self.wrong_output - self.right_output)))


def plant(name: str, q, k, v, scale: float, allowed=None) -> Planted:
    """Mistake `name` on the example q (L, E), k (S, E), v (S, Ev) with its may-attend grid
    `allowed` (L, S) or None."""
    m = mistake(name)
    p = problem(q, k, v, scale, allowed)
    L, E, S = p.q.shape[-2], p.q.shape[-1], p.k.shape[-2]
    notes, is_causal = [], allowed is not None and bool(np.all(p.allowed == causal(L, S, 0)))
    if (m.needs == "mask" and allowed is None) or (m.needs == "causal" and not is_causal):
        p, is_causal = problem(q, k, v, scale, causal(L, S, 0)), True
        had = "no mask" if allowed is None else "no (top-left) causal mask"
        notes.append(f"the example has {had}: shown with the causal one (is_causal=True)")
    if m.plant is None:
        p = Problem(p.q * LARGE, p.k, p.v, p.scale, p.allowed, None, False)
        notes.append(f"q times {LARGE:g} (large logits), the mistake computed in float32")
    ones = Problem(p.q, p.k, np.eye(S), p.scale, p.allowed, None, False)  # weights @ I = weights
    right_w, right_o = variants.attend(ones), variants.attend(p)
    keywords = {} if m.plant is None else m.plant(p, is_causal)
    if keywords.get("transpose") is False and E != S:
        error = f"q @ k is (L, E) @ (S, E) = ({L}, {E}) @ ({S}, {E}): it runs only when E == S"
        return Planted(m, right_w, None, right_o, None, "; ".join(notes), error)
    same_weights = keywords.get("read_k_as_v")  # the weights are right; v is not
    wrong_w = right_w if same_weights else attend(m, ones, is_causal)
    return Planted(m, right_w, wrong_w, right_o, attend(m, p, is_causal), "; ".join(notes), "")


@dataclass(frozen=True)
class Diagnosis:
    """What scratch.check says about a planted kernel."""

    name: str
    verdict: str  # the report's one-line verdict
    diagnosis: str  # the checker's named mistake ("" when it names none)
    failed: tuple[str, ...]  # the failing cases' names


def diagnose(name: str, progress: Callable | None = None) -> Diagnosis:
    """Run scratch.check on the kernel with mistake `name` (float32, the standard cases)."""
    from scratch.checker import check

    report = check(kernel(name), progress=progress)
    named = report.diagnosis or next((c.diagnosis for c in report.failed if c.diagnosis), "")
    return Diagnosis(name, report.verdict, named or "", tuple(c.name for c in report.failed))


__all__ = [
    "MISTAKES",
    "NAMES",
    "Diagnosis",
    "Mistake",
    "Planted",
    "diagnose",
    "kernel",
    "mistake",
    "plant",
]
