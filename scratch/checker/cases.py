"""The checker's seeded cases: small ones that tell mistakes apart, block-sized ones."""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, replace
from math import cos, log, sin, sqrt

from scratch.ops.nested import reshape

CASE_SETS = ("standard", "full", "large", "medium")
# what `require=` may name, and how the verdict names a feature a kernel refused
FEATURES = {
    "batch": "leading dims",
    "mask": "masks",
    "causal": "causal",
    "scale": "scale",
    "gqa": "GQA",
    "ev": "Ev != E",
    "float32": "float32",
    "float64": "float64",
}
BACKWARD_FEATURES = (*FEATURES, "dropout")  # what check_backward's `require=` may name
DROPOUT_P = 0.25  # the dropout cases' probability; the kept entries are scaled by 1 / (1 - p)
TWO_PI = 2.0 * math.pi  # random.gauss's TWOPI
RAMP = 3.0  # late-max cases: a score offset of RAMP^2 * 4 (j/S) / sqrt(E), rising along the keys


@dataclass(frozen=True)
class Case:
    """One seeded test input: shapes, the keywords fn gets, and which features it needs.

    A backward case is a case with a grad_output (and perhaps dropout); a variant case is a case
    with a variant's parameters (variant_cases.VariantCase).

    Attributes:
        name: the case's name in the report.
        q: the query's shape (..., L, E).
        k: the key's shape (..., S, E).
        v: the value's shape (..., S, Ev).
        mask: "none", "bool", "float" or "empty-row" (bool with a fully masked row).
        is_causal: fn gets is_causal=True.
        scale: the scale fn gets; None: not given (1 / sqrt(E)).
        gqa: fn gets enable_gqa=True (k, v with fewer heads).
        dtype: the case's own dtype; None: the dtype the checker was asked for.
        q_size: the spread of q; large values make exp overflow without max subtraction.
        late_max: scores rise along the keys: the last key block holds each row's max.
        rows: > 0: the ground truth computes only this many seeded query rows per head.
        dropout_p: backward cases: fn gets dropout_p and the forward's kept entries.
        grad_output: a backward case: fn also gets a seeded dO, returns (dq, dk, dv).
    """

    name: str
    q: tuple[int, ...]
    k: tuple[int, ...]
    v: tuple[int, ...]
    mask: str = "none"  # "none" | "bool" | "float" | "empty-row" (bool with a fully masked row)
    is_causal: bool = False
    scale: float | None = None
    gqa: bool = False
    dtype: str | None = None  # None: the dtype the checker was asked for
    q_size: float = 1.0  # spread of q; large values make exp overflow without max subtraction
    late_max: bool = False  # scores rise along the keys: the last key block holds each row's max
    rows: int = 0  # > 0: the ground truth computes only this many seeded query rows per head
    dropout_p: float = 0.0  # backward cases: fn gets dropout_p and the forward's kept entries
    grad_output: bool = False  # a backward case: fn also gets a seeded dO, returns (dq, dk, dv)

    def features(self, dtype: str) -> tuple[str, ...]:
        """Optional features (keys of FEATURES): fn may refuse a case that uses one.

        Args:
            dtype: the dtype the check runs in ("float32", ...); a case pinned to another lists
                that dtype.
        """
        found = []
        if len(self.q) > 2:
            found.append("batch")
        if self.mask != "none":
            found.append("mask")
        if self.is_causal:
            found.append("causal")
        if self.scale is not None:
            found.append("scale")
        if self.gqa:
            found.append("gqa")
        if self.v[-1] != self.q[-1]:
            found.append("ev")
        if self.dtype is not None and self.dtype != dtype:
            found.append(self.dtype)
        if self.dropout_p:
            found.append("dropout")
        return tuple(found)

    def keywords(self) -> dict:
        """The keywords fn gets for this case (besides a mask): is_causal, scale, enable_gqa."""
        found: dict = {}
        if self.is_causal:
            found["is_causal"] = True
        if self.scale is not None:
            found["scale"] = self.scale
        if self.gqa:
            found["enable_gqa"] = True
        return found

    def options(self) -> str:
        """The case's options in words, for the report."""
        words = []
        if self.mask != "none":
            words.append(
                {"empty-row": "bool mask, a fully masked row"}.get(self.mask, f"{self.mask} mask")
            )
        if self.is_causal:
            words.append("is_causal")
        if self.scale is not None:
            words.append(f"scale={self.scale:g}")
        if self.gqa:
            words.append("enable_gqa")
        if self.q_size != 1.0:
            words.append(f"large logits (std {self.q_size:g})")  # q.k/sqrt(E) ~ N(0, q_size^2)
        if self.late_max:
            words.append("row max in the last key block")
        if self.rows:
            words.append(f"{self.rows} sampled rows per head")
        if self.dropout_p:
            words.append(f"dropout_p={self.dropout_p:g} with the forward's mask")
        return ", ".join(words) or "-"


def standard_cases(dtype: str) -> list[Case]:
    """Small cases that tell the mistakes apart, then block-sized ones shaped like real kernels.

    Args:
        dtype: the checked dtype's name (float64 cases may reach larger scores).

    Returns:
        The cases, in order.
    """
    big = 1000.0 if dtype == "float64" else 100.0  # float64 exp overflows only past 709
    cases = [
        Case("plain", (5, 8), (7, 8), (7, 4)),
        Case("square", (4, 6), (6, 6), (6, 5)),  # E == S: q @ k without .T would run
        Case("batch-heads", (2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5)),
        Case("bool-mask", (5, 8), (7, 8), (7, 4), mask="bool"),
        Case("float-mask", (5, 8), (7, 8), (7, 4), mask="float"),
        Case("float-mask-square", (6, 8), (6, 8), (6, 8), mask="float"),  # a transposed mask runs
        Case("causal-square", (6, 8), (6, 8), (6, 4), is_causal=True),  # L == S
        Case("causal-wide", (4, 8), (7, 8), (7, 4), is_causal=True),  # L < S
        Case("causal-tall", (7, 8), (4, 8), (4, 4), is_causal=True),  # L > S
        Case("custom-scale", (5, 8), (7, 8), (7, 8), scale=0.3),  # E == Ev: runs where Ev != E
        Case("gqa", (1, 4, 5, 8), (1, 2, 7, 8), (1, 2, 7, 4), gqa=True),
        Case("masked-row", (5, 8), (7, 8), (7, 4), mask="empty-row"),
        Case("large-logits", (5, 8), (7, 8), (7, 4), q_size=big),
    ]
    for other in ("float32", "float64"):
        if other != dtype:
            cases.append(Case(other, (5, 8), (7, 8), (7, 8), dtype=other))
    # key lengths spanning several blocks of 8..128 with a partial last block, E == Ev
    cases += [
        Case("keys-17", (16, 64), (17, 64), (17, 64)),
        Case("keys-65-late-max", (9, 64), (65, 64), (65, 64), late_max=True),
        Case("keys-131-d128", (12, 128), (131, 128), (131, 128)),
        Case("keys-257-late-max", (6, 64), (257, 64), (257, 64), late_max=True),
        Case("queries-70-keys-33", (70, 64), (33, 64), (33, 64)),  # L > S across blocks
        Case("mask-65", (9, 64), (65, 64), (65, 64), mask="bool"),
        Case("causal-131", (131, 64), (131, 64), (131, 64), is_causal=True),  # L == S
        Case("causal-wide-131", (40, 64), (131, 64), (131, 64), is_causal=True),
        Case("causal-tall-65", (100, 64), (65, 64), (65, 64), is_causal=True),
        Case("gqa-65", (1, 4, 9, 64), (1, 2, 65, 64), (1, 2, 65, 64), gqa=True),
    ]
    return cases


def full_cases(dtype: str) -> list[Case]:
    """The standard cases plus more sizes.

    Args:
        dtype: the checked dtype's name (float64 cases may reach larger scores).

    Returns:
        The cases, in order.
    """
    return standard_cases(dtype) + [
        Case("tiny", (1, 1), (1, 1), (1, 1)),
        Case("one-key", (6, 4), (1, 4), (1, 3)),
        Case("medium", (48, 32), (48, 32), (48, 32)),
        Case("long-keys", (3, 16), (300, 16), (300, 8)),
        Case("wide-head", (8, 128), (8, 128), (8, 64)),
        Case("batch-causal", (2, 2, 24, 16), (2, 2, 24, 16), (2, 2, 24, 16), is_causal=True),
        Case("gqa-mask", (2, 6, 9, 8), (2, 2, 11, 8), (2, 2, 11, 8), mask="bool", gqa=True),
        Case("causal-late-max", (70, 64), (129, 64), (129, 64), is_causal=True, late_max=True),
    ]


def large_cases(dtype: str) -> list[Case]:
    """L = S = 4096, head dim 64: checked on a seeded sample of query rows per head.

    Args:
        dtype: the checked dtype's name (the same cases for every dtype).

    Returns:
        The cases, in order.
    """
    return sampled_cases("large", 4096)


def medium_cases(dtype: str) -> list[Case]:
    """The large cases at L = S = 1024, for slow kernels such as Triton's interpreter.

    Triton's interpreter (TRITON_INTERPRET=1) takes about 10 ms of CPU per 64 x 64 tile step,
    4 minutes for the large cases' 22,500.

    Args:
        dtype: the checked dtype's name (the same cases for every dtype).

    Returns:
        The cases, in order.
    """
    return sampled_cases("medium", 1024)


def sampled_cases(name: str, n: int) -> list[Case]:
    """Plain, causal and GQA (4 query heads, 2 kv heads) at L = S = n, head dim 64, each checked
    on a seeded sample of 24 query rows (8 per head for GQA)."""
    return [
        Case(name, (n, 64), (n, 64), (n, 64), rows=24),
        Case(f"{name}-causal", (n, 64), (n, 64), (n, 64), is_causal=True, rows=24),
        Case(f"{name}-gqa", (1, 4, n, 64), (1, 2, n, 64), (1, 2, n, 64), gqa=True, rows=8),
    ]


def backward_cases(dtype: str) -> list[Case]:
    """Small cases that tell the backward mistakes apart (the standard ones with a grad_output,
    where they serve), then a few spanning key blocks of 8 and 16."""
    C = functools.partial(Case, grad_output=True)
    same = {c.name: replace(c, grad_output=True) for c in standard_cases(dtype)}
    masks_and_causal = ("bool-mask", "float-mask", "causal-square", "causal-wide", "causal-tall")
    cases = [
        same["plain"],
        C("square", (6, 8), (6, 8), (6, 8)),  # L == S: dS^T has dS's shape; E == Ev: dK ~ dV
        same["batch-heads"],
        *(same[name] for name in masks_and_causal),
        C("custom-scale", (5, 8), (7, 8), (7, 4), scale=0.3),
        same["gqa"],
        same["masked-row"],
        same["large-logits"],
        C("dropout", (5, 8), (7, 8), (7, 4), dropout_p=DROPOUT_P),
    ]
    for other in ("float32", "float64"):
        if other != dtype:
            cases.append(C(other, (5, 8), (7, 8), (7, 4), dtype=other))
    # key lengths spanning blocks of 8 and 16 with a partial last block, E == Ev
    return cases + [
        C("keys-17", (8, 16), (17, 16), (17, 16)),
        C("keys-65-late-max", (5, 32), (65, 32), (65, 32), late_max=True),
        C("causal-33", (33, 16), (33, 16), (33, 16), is_causal=True),
        C("gqa-33", (1, 4, 5, 16), (1, 2, 33, 16), (1, 2, 33, 16), gqa=True),
    ]


def cases_for(name: str, dtype: str) -> list[Case]:
    """The case set called `name` (one of CASE_SETS)."""
    sets = {
        "standard": standard_cases,
        "full": full_cases,
        "large": large_cases,
        "medium": medium_cases,
    }
    return sets[name](dtype)


def gauss(rng: random.Random, shape: tuple[int, ...], size: float = 1.0) -> list:
    """Nested lists of N(0, size^2) floats: rng.gauss(0.0, size) drawn in row-major order."""
    return reshape(normals(rng, math.prod(shape), size), shape)


def normals(rng: random.Random, n: int, size: float = 1.0) -> list[float]:
    """n draws of rng.gauss(0.0, size), bit for bit, made a Box-Muller pair at a time.

    rng.gauss turns two uniform draws x, y into z = cos(2 pi x) r and, kept for the next call,
    sin(2 pi x) r with r = sqrt(-2 log(1 - y)); the same expressions in list comprehensions cost
    a third of one method call per value (4096-token cases draw 3.7 million values)."""
    first = []
    if n and getattr(rng, "gauss_next", None) is not None:  # a sin half left by a last call
        first.append(rng.gauss(0.0, size))
        n -= 1
    draw = rng.random
    uniform = [draw() for _ in range(n - n % 2)]  # x, y, x, y, ...
    angle = [x * TWO_PI for x in uniform[::2]]
    radius = [sqrt(-2.0 * log(1.0 - y)) for y in uniform[1::2]]
    out = first + uniform  # the right length; every uniform draw is overwritten below
    start = len(first)
    out[start : start + len(uniform) : 2] = [0.0 + cos(a) * r * size for a, r in zip(angle, radius)]
    out[start + 1 : start + len(uniform) : 2] = [
        0.0 + sin(a) * r * size for a, r in zip(angle, radius)
    ]
    if n % 2:  # the last one: rng keeps its sin half, as after the same number of calls
        out.append(rng.gauss(0.0, size))
    return out


def draw(rng: random.Random, case: Case) -> tuple[list, list, list, list | None]:
    """The case's seeded q, k, v (the late max added) and mask, drawn in this order."""
    q = gauss(rng, case.q, case.q_size)
    k, v = gauss(rng, case.k), gauss(rng, case.v)
    if case.late_max:
        add_late_max(q, k)
    return q, k, v, mask_values(rng, case, case.q[-2], case.k[-2])


def add_late_max(q: list, k: list) -> None:
    """Scores rise along the keys (2-D q, k): q's last feature RAMP, key j's last 4 RAMP j/S."""
    for row in q:
        row[-1] = RAMP
    for j, row in enumerate(k):
        row[-1] = 4.0 * RAMP * j / len(k)


def mask_values(rng: random.Random, case: Case, L: int, S: int) -> list | None:
    """The case's (L, S) mask: bools with >= 1 True per row, or floats with some -inf."""
    if case.mask in ("bool", "empty-row"):
        rows = [[rng.random() < 0.6 for _ in range(S)] for _ in range(L)]
        for i, row in enumerate(rows):
            row[rng.randrange(S)] = True
            if case.mask == "empty-row" and i == 1:
                row[:] = [False] * S
        return rows
    if case.mask == "float":
        rows = [
            [rng.uniform(-3.0, 1.0) if rng.random() < 0.75 else -math.inf for _ in range(S)]
            for _ in range(L)
        ]
        for row in rows:
            j = rng.randrange(S)
            row[j] = rng.uniform(-3.0, 1.0)
        return rows
    return None
