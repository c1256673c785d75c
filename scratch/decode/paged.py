"""A paged KV cache (vLLM style): fixed-size pages, read through a block table.

key_cache (num_pages, Hkv, page_size, E) and value_cache (num_pages, Hkv, page_size, Ev) hold
pages of page_size tokens; block_table[b] lists the page ids of sequence b in order, so its
token t lives in page block_table[b][t // page_size] at slot t % page_size; seq_lens[b] says how
many tokens sequence b has (the last page may be partly filled; the rest of it is never read).
Pages are scratch's head-major layout (FlashAttention's paged cache puts heads after the slot).
Decoding a paged cache equals decoding the contiguous cache (tests/test_decode_paged.py).
"""

from __future__ import annotations

import numbers
from math import nan

from scratch.core.options import FlexOptions
from scratch.decode.attention import (
    arrays_only,
    attend_at,
    check_mods,
    decode_door,
    four_dims,
    key_value,
    query_offset,
)
from scratch.flex.forward import prepare
from scratch.ops.validate import check_flag, check_positive_int


def page_slot(block_row: list[int], t: int, page_size: int) -> tuple[int, int]:
    """Where token t of a sequence lives: (page id, slot in the page)."""
    return block_row[t // page_size], t % page_size


def _ids(x: object) -> object:
    """An integer array (NumPy's, torch's: what vLLM passes) as nested Python ints; else x."""
    if hasattr(x, "tolist") and "int" in str(getattr(x, "dtype", "")):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [int(v) if isinstance(v, numbers.Integral) and not isinstance(v, bool) else _ids(v)
                for v in x]  # fmt: skip
    return x


def check_table(
    block_table: object, seq_lens: object, num_pages: int, page_size: int, B: int | None = None
) -> tuple[list, list]:
    """block_table (B rows of page ids < num_pages), seq_lens (B, each fitting its pages), as
    Python lists (integer arrays and NumPy integers taken): (block_table, seq_lens)."""
    block_table, seq_lens = _ids(block_table), _ids(seq_lens)
    if not isinstance(block_table, (list, tuple)) or len(block_table) != (B or len(block_table)):
        raise ValueError(f"block_table: expected {B or 'B'} rows of page ids (one per sequence)")
    if not isinstance(seq_lens, (list, tuple)) or len(seq_lens) != len(block_table):
        raise ValueError(f"seq_lens: expected {len(block_table)} token counts (one per sequence)")
    for b, (row, n) in enumerate(zip(block_table, seq_lens)):
        if not isinstance(row, (list, tuple)):
            raise TypeError(f"block_table[{b}]: expected a list of page ids, found {row!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"seq_lens[{b}]: expected a positive integer, found {n!r}")
        used = -(-n // page_size)  # pages the sequence fills; the rest may be padding (vLLM: -1)
        if used > len(row):
            raise ValueError(
                f"seq_lens[{b}]: {n} tokens need {used} pages of {page_size}, "
                f"block_table[{b}] lists {len(row)}"
            )
        for p, page in enumerate(row):
            if isinstance(page, bool) or not isinstance(page, int):
                raise TypeError(f"block_table[{b}][{p}]: expected a page id (int), found {page!r}")
            if p < used and not 0 <= page < num_pages:
                raise ValueError(
                    f"block_table[{b}][{p}]: page id {page} out of range 0..{num_pages - 1}"
                )
    return block_table, seq_lens


def check_caches(key_cache: object, value_cache: object) -> tuple[list, list, tuple]:
    """The two caches, same pages, heads and page size: (keys, values, (P, Hkv, page, E, Ev))."""
    k, (P, Hkv, page_size, E) = four_dims(key_cache, "key_cache", "(num_pages, Hkv, page, E)")
    v, (Pv, Hv, page_v, Ev) = four_dims(value_cache, "value_cache", "(num_pages, Hkv, page, Ev)")
    if (Pv, Hv, page_v) != (P, Hkv, page_size):
        raise ValueError(
            f"value_cache: expected (num_pages, Hkv, page_size) = {(P, Hkv, page_size)} as "
            f"key_cache, found {(Pv, Hv, page_v)}"
        )
    return k, v, (P, Hkv, page_size, E, Ev)


def read_pages(key_cache: object, value_cache: object, block_table: object, seq_lens: object):
    """Each sequence's keys and values gathered in order: lists of (Hkv, seq_lens[b], E or Ev)."""
    k, v, (P, Hkv, page_size, _, _) = check_caches(key_cache, value_cache)
    block_table, seq_lens = check_table(block_table, seq_lens, P, page_size)
    keys, values = [], []
    for row, n in zip(block_table, seq_lens):
        slots = [page_slot(row, t, page_size) for t in range(n)]
        keys.append([[k[p][h][s] for p, s in slots] for h in range(Hkv)])  # (Hkv, n, E)
        values.append([[v[p][h][s] for p, s in slots] for h in range(Hkv)])  # (Hkv, n, Ev)
    return keys, values


@decode_door
def paged_decode_attention(
    query: object,
    key_cache: object,
    value_cache: object,
    block_table: object,
    seq_lens: object,
    options: FlexOptions,
) -> tuple[list, list]:
    """decode_attention per sequence b: query (B, H, L, E) the last L of its seq_lens[b] tokens.

    Args:
        query: q (B, H, L, E).
        key_cache: the pages' keys (P, Hkv, page_size, E) (to_pages cuts a cache into them).
        value_cache: the pages' values (P, Hkv, page_size, Ev).
        block_table: per sequence b, its pages in order.
        seq_lens: per sequence b, its cached tokens (at least L).

    Returns:
        output (B, H, L, Ev), or (output, lse (B, H, L)) with return_lse=True.
    """
    q, (B, H, L, E) = four_dims(query, "query", "(B, H, L, E)")
    _, _, (P, Hkv, page_size, Ek, _) = check_caches(key_cache, value_cache)
    if Ek != E or H % Hkv or (H != Hkv and not check_flag(options.enable_gqa, "enable_gqa")):
        raise ValueError(
            f"key_cache: {Hkv} kv heads of {Ek} features for {H} query heads of {E} expected "
            f"equal features, and equal heads or enable_gqa=True with H % Hkv == 0"
        )
    block_table, seq_lens = check_table(block_table, seq_lens, P, page_size, B)
    for b, n in enumerate(seq_lens):
        if n < L:
            raise ValueError(f"seq_lens[{b}]: {n} tokens, fewer than the {L} queries")
    keys, values = read_pages(key_cache, value_cache, block_table, seq_lens)
    output, lse, mods = [], [], (options.score_mod, options.mask_mod)
    for b, n in enumerate(seq_lens):
        x = prepare([q[b]], [keys[b]], [values[b]], arrays_only(options))
        check_mods(*mods, None, H, n)  # B unknown to one sequence's call
        out_b, lse_b = attend_at(x, query_offset(L, n), 0, *mods, batch=b)
        output.append(out_b[0])
        lse.append(lse_b[0])
    return output, lse


def to_pages(
    key: object, value: object, page_size: int, page_ids: list[int] | None = None
) -> tuple[list, list, list[list[int]], list[int]]:
    """A contiguous cache (B, Hkv, S, E) cut into pages: (key_cache, value_cache, block_table,
    seq_lens). page_ids: the pages to fill, in order (default 0, 1, ...); unused slots hold nan."""
    page_size = check_positive_int(page_size, "page_size")
    k, v, (B, Hkv, S, E, Ev) = key_value(key, value)
    per_seq = -(-S // page_size)
    ids = list(range(B * per_seq)) if page_ids is None else list(page_ids)
    if (
        len(ids) != B * per_seq
        or len(set(ids)) != len(ids)
        or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in ids)
    ):
        raise ValueError(
            f"page_ids: expected {B * per_seq} distinct page ids >= 0 ({per_seq} per sequence)"
        )
    P = max(ids) + 1

    def empty(D: int) -> list:  # (P, Hkv, page_size, D) of nan
        return [[[[nan] * D for _ in range(page_size)] for _ in range(Hkv)] for _ in range(P)]

    key_cache, value_cache = empty(E), empty(Ev)
    block_table = [ids[b * per_seq : (b + 1) * per_seq] for b in range(B)]
    for b in range(B):
        for t in range(S):
            p, s = page_slot(block_table[b], t, page_size)
            for h in range(Hkv):
                key_cache[p][h][s] = list(k[b][h][t])
                value_cache[p][h][s] = list(v[b][h][t])
    return key_cache, value_cache, block_table, [S] * B


__all__ = ["page_slot", "paged_decode_attention", "read_pages", "to_pages"]
