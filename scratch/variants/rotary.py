"""RoPE as a part of a variant: q and k turned by their positions before the scores.

Not a mask or a score change (no mask_mod, no score_mod): it changes q and k themselves, so a
variant that holds it (`combine(SlidingWindow(2, 0), Rotary())`) tells the ground truth's trace
to add the step q, k -> q_rotated, k_rotated (scratch.rotary, each head's d_head features).
Positions follow decode's alignment: key j sits at position j, query i at i + S - L (the L
queries are the last L positions of the S keys; L = S: position i).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scratch.ops.rope import PAIRINGS, _pairs, angles, rotary, rotary_words
from scratch.ops.validate import check_choice
from scratch.variants.arrays import is_torch
from scratch.variants.base import Variant


@dataclass(frozen=True)
class Rotary(Variant):
    """RoPE on q and k (pairing "half" or "interleaved", base, first rotary_dim features).

    Attributes:
        base: theta_k = base ** (-2k / rotary_dim) for pair k.
        pairing: "half" (Llama: features k and k + rotary_dim/2) or "interleaved" (GPT-J).
        rotary_dim: the features that turn (even); None: all E.
    """

    base: float = 10000.0
    pairing: str = "half"
    rotary_dim: int | None = None

    def __post_init__(self):
        ok = isinstance(self.base, (int, float)) and not isinstance(self.base, bool)
        if not ok or not (0.0 < self.base < math.inf):
            raise ValueError(f"base: expected a finite number > 0, found {self.base!r}")
        check_choice(self.pairing, "pairing", PAIRINGS)

    def check(self, B: int | None, H: int | None, L: int, S: int) -> None:
        if L > S:
            raise ValueError(f"rotary: positions are those of decode (L <= S), found L={L}, S={S}")

    @staticmethod
    def positions(L: int, S: int) -> tuple[list[int], list[int]]:
        """(query positions, key positions): i + S - L for query i, j for key j.

        Args:
            L: the number of queries (the last L of S positions).
            S: the number of keys.
        """
        return [i + S - L for i in range(L)], list(range(S))

    def turn(self, x: list, positions: list[int]) -> list:
        """x turned by scratch.rotary, row n by the angle of positions[n].

        Args:
            x: q or k of one head, (L, d_head) nested lists.
            positions: (L,) each row's position.
        """
        return rotary(
            x, positions, base=self.base, pairing=self.pairing, rotary_dim=self.rotary_dim
        )

    def turn_array(self, x: object, positions: list[int], xp: object) -> object:
        """x turned as `turn` turns rows, on an array: the same angles, in x's dtype.

        cos and sin come from Python's math; each pair a' = a cos - b sin, b' = b cos + a sin in
        x's dtype (the features past rotary_dim pass through).

        Args:
            x: (..., n, d_head), a NumPy array or torch tensor.
            positions: (n,) each row's position.
            xp: x's module, numpy or torch.
        """
        rd = x.shape[-1] if self.rotary_dim is None else self.rotary_dim
        if rd % 2:
            raise ValueError(f"x: the last dimension ({rd}) is odd; rotary turns pairs of features")
        a, b = (list(idx) for idx in zip(*_pairs(self.pairing, rd)))
        theta = [angles(p, rd, self.base) for p in positions]  # (n, rd / 2)
        trig = (
            [[math.cos(t) for t in row] for row in theta],
            [[math.sin(t) for t in row] for row in theta],
        )
        if is_torch(xp):
            cos, sin = (xp.as_tensor(t, dtype=x.dtype, device=x.device) for t in trig)
            out = x.clone()
        else:
            cos, sin = (xp.asarray(t, dtype=x.dtype) for t in trig)
            out = x.copy()
        xa, xb = x[..., a], x[..., b]  # (..., n, rd / 2) each
        out[..., a] = xa * cos - xb * sin
        out[..., b] = xb * cos + xa * sin
        return out

    def words(self, row: list[float], position: int, feature: int, name: str) -> str:
        """Hover text of one rotated feature (angle, cos, sin of its pair).

        Args:
            row: (d_head,) the row before the turn.
            position: the row's position.
            feature: the feature's column c.
            name: the row's name in the words ("q" or "k").
        """
        return rotary_words(
            row, position, feature, name=name, base=self.base, pairing=self.pairing,
            rotary_dim=self.rotary_dim,
        )  # fmt: skip

    def rule(self) -> str:
        dims = "" if self.rotary_dim is None else f", first {self.rotary_dim} features"
        return f"RoPE ({self.pairing} pairing, base {self.base:g}{dims})"
