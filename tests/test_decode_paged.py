"""The paged KV cache: pages read through block_table and seq_lens equal the contiguous cache.

Pages in a shuffled order (so block_table is not the identity), sequences of different
lengths in one batch (each its own true positions), a partly filled last page whose unused
slots hold nan (a read past seq_lens shows up), bad tables refused by name, and a wrong page
read planted and seen to fail. Standard library only.
"""

from __future__ import annotations

import math
import random

import pytest
from decode_cases import mods, problem, rows, variants

import scratch
import scratch.decode.paged
from scratch.decode.paged import read_pages, to_pages
from scratch.variants import Causal

SINKS = [0.3, -0.5, 1.1, 0.0]


def shuffled_pages(k, v, page_size: int, seed: int):
    """to_pages with the page ids in a seeded random order (and two spare pages)."""
    B, S = len(k), len(k[0][0])
    n = B * -(-S // page_size)
    ids = random.Random(seed).sample(range(n + 2), n)
    return to_pages(k, v, page_size, ids)


def test_to_pages_places_token_t_at_page_t_over_page_size():
    k = [[[[float(t)] for t in range(5)]]]  # (1, 1, 5, 1): token t holds t
    key_cache, value_cache, block_table, seq_lens = to_pages(k, k, 2, [4, 0, 2])
    assert block_table == [[4, 0, 2]] and seq_lens == [5]
    assert key_cache[4][0] == [[0.0], [1.0]] and key_cache[0][0] == [[2.0], [3.0]]
    assert key_cache[2][0][0] == [4.0] and math.isnan(key_cache[2][0][1][0])  # unused slot
    assert all(math.isnan(x) for x in key_cache[1][0][0] + key_cache[3][0][1])  # spare pages
    keys, values = read_pages(key_cache, value_cache, block_table, seq_lens)
    assert keys == values == [k[0]]


@pytest.mark.parametrize("page_size", [1, 2, 3, 7])
@pytest.mark.parametrize("seed", range(5))
def test_paged_decode_equals_the_contiguous_cache(page_size, seed):
    """Same output and lse (==) as decode_attention on the contiguous keys and values."""
    q, k, v = problem(seed, S=7)
    q = rows(q, 5, 7)  # the last 2 positions
    key_cache, value_cache, block_table, seq_lens = shuffled_pages(k, v, page_size, seed)
    assert read_pages(key_cache, value_cache, block_table, seq_lens) == (k, v)
    for name in ("causal", "window softcap alibi", "sink tokens"):
        options = {**mods(variants(4, 7)[name]), "enable_gqa": True, "return_lse": True}
        paged = scratch.paged_decode_attention(
            q, key_cache, value_cache, block_table, seq_lens, **options, sinks=SINKS
        )
        assert paged == scratch.decode_attention(q, k, v, **options, sinks=SINKS), name


@pytest.mark.parametrize("seed", range(4))
def test_sequences_of_different_lengths_each_at_their_own_positions(seed):
    """Batch entry b holds seq_lens[b] tokens; its queries are its last L positions."""
    q, k, v = problem(seed, S=7)
    L, lens = 2, [4, 7]
    key_cache, value_cache, block_table, _ = shuffled_pages(k, v, 3, seed)
    variant = variants(4, 7)["window softcap alibi"]
    options = {**mods(variant), "enable_gqa": True, "return_lse": True}
    ends = [rows([q[b]], n - L, n) for b, n in enumerate(lens)]  # each sequence's last L
    paged_q = [e[0] for e in ends]
    out, lse = scratch.paged_decode_attention(
        paged_q, key_cache, value_cache, block_table, lens, **options
    )
    for b, n in enumerate(lens):
        alone = scratch.decode_attention(ends[b], rows([k[b]], 0, n), rows([v[b]], 0, n), **options)
        assert (out[b], lse[b]) == (alone[0][0], alone[1][0]), f"sequence {b}"


def test_the_mods_receive_the_batch_entry():
    """A mask_mod that reads b sees each sequence's own index (not 0 for every call)."""
    q, k, v = problem(1, S=5)
    seen_b = set()

    def mask_mod(b, h, q_idx, kv_idx):
        seen_b.add(b)
        return kv_idx <= q_idx

    key_cache, value_cache, block_table, seq_lens = to_pages(k, v, 2)
    scratch.paged_decode_attention(
        rows(q, 4, 5),
        key_cache,
        value_cache,
        block_table,
        seq_lens,
        mask_mod=mask_mod,
        enable_gqa=True,
    )
    assert seen_b == {0, 1}


def test_planted_wrong_page_read_fails(monkeypatch):
    """Plant: token t read from page block_table[b][t // page_size - 1] (one page early)."""
    q, k, v = problem(3, S=7)
    q = rows(q, 6, 7)
    pages = shuffled_pages(k, v, 2, 3)
    options = {"mask_mod": Causal().mask_mod, "enable_gqa": True}
    expected = scratch.decode_attention(q, k, v, **options)
    assert scratch.paged_decode_attention(q, *pages, **options) == expected
    monkeypatch.setattr(
        scratch.decode.paged,
        "page_slot",
        lambda row, t, size: (row[max(t // size - 1, 0)], t % size),
    )
    assert scratch.paged_decode_attention(q, *pages, **options) != expected


def test_a_read_past_the_true_length_shows_as_nan():
    """seq_lens one too long (the last page has room): the unused slot's nan reaches the output,
    so a kernel or a table that reads past a sequence's end cannot pass unnoticed."""
    q, k, v = problem(3, S=5)
    key_cache, value_cache, block_table, seq_lens = to_pages(k, v, 2)
    out = scratch.paged_decode_attention(
        rows(q, 4, 5),
        key_cache,
        value_cache,
        block_table,
        [n + 1 for n in seq_lens],
        enable_gqa=True,
    )
    assert any(math.isnan(x) for b in out for h in b for r in h for x in r)


# ---------------------------------------------------------------- bad input, named


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        (lambda a: a.update(block_table=[[0, 1, 2]]), ValueError, "block_table: expected 2 rows"),
        (
            lambda a: a.update(block_table=[[0, 1, 9], [3, 4, 5]]),
            ValueError,
            r"block_table\[0\]\[2\]: page id 9 out of range 0..5",
        ),
        (lambda a: a.update(block_table=[[0, 1, -1], [3, 4, 5]]), ValueError, "out of range"),
        (
            lambda a: a.update(block_table=[[0, 1, 2.0], [3, 4, 5]]),
            TypeError,
            r"block_table\[0\]\[2\]: expected a page id",
        ),
        (lambda a: a.update(block_table=[[0, 1, 2], 3]), TypeError, r"block_table\[1\]"),
        (lambda a: a.update(seq_lens=[5]), ValueError, "seq_lens: expected 2"),
        (
            lambda a: a.update(seq_lens=[5, 7]),
            ValueError,
            r"seq_lens\[1\]: 7 tokens need 4 pages of 2, block_table\[1\] lists 3",
        ),
        (lambda a: a.update(seq_lens=[5, 0]), ValueError, r"seq_lens\[1\]: expected a positive"),
        (lambda a: a.update(seq_lens=[1, 5]), ValueError, r"seq_lens\[0\]: 1 tokens, fewer than"),
        (lambda a: a.update(value_cache=a["value_cache"][:5]), ValueError, "value_cache"),
        (lambda a: a.update(key_cache=[p[:1] for p in a["key_cache"]]), ValueError, "key_cache"),
        (lambda a: a.update(key_cache=a["key_cache"][0]), ValueError, "key_cache: expected 4"),
        (lambda a: a.update(mask_mod=Causal(2).mask_mod), ValueError, "mask_mod"),
    ],
)
def test_bad_tables_and_caches_are_named(change, error, words):
    q, k, v = problem(0, H=2, Hkv=2, S=5)
    key_cache, value_cache, block_table, seq_lens = to_pages(k, v, 2)
    args = {
        "key_cache": key_cache,
        "value_cache": value_cache,
        "block_table": block_table,
        "seq_lens": seq_lens,
    }
    change(args)
    with pytest.raises(error, match=words):
        scratch.paged_decode_attention(rows(q, 3, 5), **args)


def test_to_pages_refuses_bad_page_sizes_and_ids():
    _, k, v = problem(0, S=5)
    with pytest.raises(ValueError, match="page_size"):
        to_pages(k, v, 0)
    with pytest.raises(ValueError, match="page_size"):
        to_pages(k, v, 2.5)
    with pytest.raises(ValueError, match="page_ids: expected 6 distinct"):
        to_pages(k, v, 2, [0, 1, 2, 3, 4, 4])
    with pytest.raises(ValueError, match="value"):
        to_pages(k, rows(v, 0, 4), 2)


def test_integer_array_tables_and_padding_past_the_used_pages_are_taken():
    """vLLM passes int32 arrays and pads a row with -1 past the pages a sequence fills."""
    np = pytest.importorskip("numpy")
    q, k, v = problem(0, H=2, Hkv=2, S=5)
    key_cache, value_cache, block_table, seq_lens = to_pages(k, v, 2)
    q = rows(q, 3, 5)
    want = scratch.paged_decode_attention(q, key_cache, value_cache, block_table, seq_lens)
    arrays = np.asarray(block_table, dtype=np.int32), np.asarray(seq_lens, dtype=np.int32)
    assert scratch.paged_decode_attention(q, key_cache, value_cache, *arrays) == want
    padded = [[*row, -1, -1] for row in block_table]  # never read: 5 tokens fill 3 pages of 2
    assert scratch.paged_decode_attention(q, key_cache, value_cache, padded, seq_lens) == want
    with pytest.raises(ValueError, match=r"block_table\[0\]\[2\]: page id -1 out of range"):
        scratch.paged_decode_attention(q, key_cache, value_cache, [[0, 1, -1], [3, 4, 5]],
                                       seq_lens)  # fmt: skip
