"""A learned relative-position bias table (T5-style, without T5's log buckets).

score + table[h][d + max_distance] with d = clamp(kv_idx - q_idx, -max_distance, max_distance):
one entry per head and per relative distance, distances beyond max_distance sharing the last
entry. A single row of 2 * max_distance + 1 numbers is shared by every head.
"""

from __future__ import annotations

from dataclasses import dataclass

from scratch.variants.arrays import clamp
from scratch.variants.arrays import entry as look_up
from scratch.variants.base import Variant, check_count, number


@dataclass(frozen=True)
class BiasTable(Variant):
    """`score + table[h][clamp(j - i, -m, m) + m]`, `m = max_distance`.

    Attributes:
        table: per query head, 2m + 1 biases, for relative distances -m..m.
    """

    table: tuple[tuple[float, ...], ...]

    def __post_init__(self):
        rows = self.table
        if isinstance(rows, (list, tuple)) and rows and not isinstance(rows[0], (list, tuple)):
            rows = [rows]
        ok = (
            isinstance(rows, (list, tuple))
            and rows
            and all(
                isinstance(r, (list, tuple)) and len(r) % 2 == 1 and len(r) == len(rows[0])
                for r in rows
            )
        )
        if not ok:
            raise ValueError(
                "table: expected rows of 2 * max_distance + 1 numbers (one row, or one per head)"
            )
        object.__setattr__(self, "table", tuple(tuple(float(x) for x in r) for r in rows))

    @property
    def max_distance(self) -> int:
        """m, the farthest relative distance with its own entry (the table's rows are 2m + 1)."""
        return len(self.table[0]) // 2

    def entry(self, h: int, q_idx: int, kv_idx: int) -> int:
        """The table column for a relative distance kv_idx - q_idx.

        Args:
            h: the query head (unused: every head's row has the same columns).
            q_idx: the query's row i.
            kv_idx: the key's column j.
        """
        m = self.max_distance
        return clamp(kv_idx - q_idx, -m, m) + m

    def check(self, B: int | None, H: int | None, L: int, S: int) -> None:
        check_count(len(self.table), H, "H", "table", "row per query head")

    def score_mod(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> float:
        row = h if len(self.table) > 1 else 0  # (H or 1, 2m + 1) table
        return score + look_up(self, "table", self.table, score, row, self.entry(h, q_idx, kv_idx))

    def rule(self) -> str:
        m = self.max_distance
        return f"bias table: score + table[h][clamp(j - i, -{m}, {m}) + {m}]"

    def score_words(self, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        c = self.entry(h, q_idx, kv_idx)
        out = self.score_mod(score, b, h, q_idx, kv_idx)
        return f"bias({number(score)}) = {number(score)} + table[{h}][{c}] = {number(out)}"
