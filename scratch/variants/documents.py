"""Packed documents (varlen): a query sees keys of its own document only.

Each batch entry packs several sequences end to end; document ids say which sequence each
position belongs to. Query i sees key j iff q_ids[b][i] == kv_ids[b][j]. From FlashAttention's
`cu_seqlens` (cumulative lengths [0, n1, n1 + n2, ..., total], one packed batch entry),
document d covers positions cu_seqlens[d] .. cu_seqlens[d + 1] - 1. Combined with causal:
combine(Documents(...), Causal()), the rule of a packed causal language model.
"""

from __future__ import annotations

from dataclasses import dataclass

from scratch.variants.arrays import entry
from scratch.variants.base import Variant, check_count
from scratch.variants.params import Param


def _ids(ids: object, name: str) -> tuple[tuple[int, ...], ...]:
    """Document ids per batch entry; a flat list is one batch entry shared by all."""
    if not isinstance(ids, (list, tuple)) or not ids:
        raise ValueError(f"{name}: expected a non-empty list of document ids, found {ids!r}")
    rows = ids if isinstance(ids[0], (list, tuple)) else [ids]
    for b, row in enumerate(rows):
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in row):
            raise ValueError(f"{name}[{b}]: expected integer document ids, found {row!r}")
    return tuple(tuple(row) for row in rows)


def ids_from_cu_seqlens(cu_seqlens: object, name: str = "cu_seqlens") -> list[int]:
    """Document ids [0, 0, 1, 1, 1, ...] from cumulative lengths [0, 2, 5, ...]."""
    ok = (
        isinstance(cu_seqlens, (list, tuple))
        and len(cu_seqlens) >= 2
        and all(isinstance(n, int) and not isinstance(n, bool) for n in cu_seqlens)
        and cu_seqlens[0] == 0
        and all(a < b for a, b in zip(cu_seqlens, cu_seqlens[1:]))
    )
    if not ok:
        raise ValueError(
            f"{name}: expected increasing integers starting at 0 ([0, n1, n1 + n2, ...]), "
            f"found {cu_seqlens!r}"
        )
    return [d for d in range(len(cu_seqlens) - 1) for _ in range(cu_seqlens[d + 1] - cu_seqlens[d])]


@dataclass(frozen=True)
class Documents(Variant):
    """Key j seen by query i iff `q_ids[b][i] == kv_ids[b][j]` (kv_ids default: q_ids).

    Attributes:
        q_ids: per batch b, each query's document id (L of them).
        kv_ids: per batch b, each key's document id (S of them); None: q_ids.
    """

    key, label = "documents", "documents (cu_seqlens)"
    params = (
        Param(
            "cu_seqlens", (), words="cumulative document lengths: 0, n1, n1 + n2, ..., the "
            "number of tokens", blank="0, {tokens}",
        ),
    )  # fmt: skip
    q_ids: tuple[tuple[int, ...], ...]
    kv_ids: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self):
        object.__setattr__(self, "q_ids", _ids(self.q_ids, "q_ids"))
        kv = self.q_ids if self.kv_ids is None else _ids(self.kv_ids, "kv_ids")
        object.__setattr__(self, "kv_ids", kv)

    @classmethod
    def from_cu_seqlens(cls, cu_seqlens_q: list[int], cu_seqlens_k: list[int] | None = None):
        """Documents of one packed batch entry from FlashAttention's cumulative lengths.

        Args:
            cu_seqlens_q: the queries' cumulative lengths [0, n1, n1 + n2, ..., L], increasing.
            cu_seqlens_k: the keys' [0, ..., S] the same way (None: the queries').
        """
        q = ids_from_cu_seqlens(cu_seqlens_q, "cu_seqlens_q")
        k = None if cu_seqlens_k is None else ids_from_cu_seqlens(cu_seqlens_k, "cu_seqlens_k")
        return cls(q, k)

    @classmethod
    def chosen(cls, values: dict, L: int, S: int, shift: int, length: int) -> Documents:
        # Variant.chosen's entry: the documents of cu_seqlens over the whole sequence (`length`
        # tokens), the L queries at positions shift.. shift + L - 1, the S keys at 0..S-1
        ids = ids_from_cu_seqlens(list(values["cu_seqlens"]), "cu_seqlens")
        if len(ids) != length:
            raise ValueError(
                f"cu_seqlens: expected the last entry to be the sequence length ({length}), "
                f"found {values['cu_seqlens'][-1]}"
            )
        return cls(ids[shift : shift + L], ids[:S])

    def check(self, B: int | None, H: int | None, L: int, S: int) -> None:
        for name, ids, n, axis in (
            ("q_ids", self.q_ids, L, "Q_LEN"),
            ("kv_ids", self.kv_ids, S, "KV_LEN"),
        ):
            check_count(len(ids), B, "B", name, "row of ids per batch entry")
            for b, row in enumerate(ids):
                if len(row) != n:
                    raise ValueError(
                        f"{name}[{b}]: expected one document id per position ({axis} = {n}; "
                        f"cu_seqlens must end at {axis}), found {len(row)}"
                    )

    def _row(self, ids: tuple, b: int) -> tuple[int, ...]:
        return ids[b if len(ids) > 1 else 0]

    def mask_mod(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        bq, bk = (b if len(ids) > 1 else 0 for ids in (self.q_ids, self.kv_ids))
        q_doc = entry(self, "q_ids", self.q_ids, q_idx, bq, q_idx)  # (B or 1, L) table
        return q_doc == entry(self, "kv_ids", self.kv_ids, kv_idx, bk, kv_idx)

    def rule(self) -> str:
        return "documents: key j seen by query i iff both are in the same document"

    def why(self, b: int, h: int, q_idx: int, kv_idx: int) -> str:
        dq, dk = self._row(self.q_ids, b)[q_idx], self._row(self.kv_ids, b)[kv_idx]
        return f" (query in document {dq}, key in document {dk})"
