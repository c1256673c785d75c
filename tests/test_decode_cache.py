"""KVCache: incremental equals full, bit for bit, in the ground truth.

A cache grows one token at a time (append k, v; attend with q); each step's output and lse
equal (==) that row of one causal flex_attention call over the whole sequence, for plain
causal and for the variants (window, sink tokens, ALiBi, softcap, bias table, chunked,
documents, combinations), GQA and learned sinks, and with RoPE applied at the true position.
Planted mistakes (positions not offset in the score, top-left, RoPE at position 0) fail.
Standard library only, and bit for bit on any host: every sum is an fsum (correctly rounded,
whatever the order of its terms) and no BLAS runs.
"""

from __future__ import annotations

import pytest
from decode_cases import full_call, mods, problem, rows, variants

import scratch
import scratch.decode.attention
from scratch.variants import PrefixLM

SINKS = [0.3, -0.5, 1.1, 0.0]  # one learned sink logit per query head (H = 4)


def mismatches(q, k, v, variant, steps, *, sinks=None, enable_gqa=True) -> list[str]:
    """Grow a cache by the token counts in `steps`; each step's rows against the full call."""
    full, full_lse = full_call(q, k, v, variant, enable_gqa=enable_gqa, sinks=sinks)
    cache, start, found = scratch.KVCache(), 0, []
    for T in steps:
        cache.append(rows(k, start, start + T), rows(v, start, start + T))
        out, lse = cache.attend(
            rows(q, start, start + T),
            **mods(variant),
            enable_gqa=enable_gqa,
            return_lse=True,
            sinks=sinks,
        )
        for b, (out_b, lse_b) in enumerate(zip(out, lse)):
            for h, (out_h, lse_h) in enumerate(zip(out_b, lse_b)):
                for t in range(T):
                    i = start + t
                    if out_h[t] != full[b][h][i] or lse_h[t] != full_lse[b][h][i]:
                        found.append(f"b {b} h {h} position {i}")
        start += T
    return found


@pytest.mark.parametrize("name", list(variants(4, 7)))
@pytest.mark.parametrize("seed", range(6))
def test_one_token_at_a_time_equals_the_full_call(name, seed):
    """Each decode step's row == the full causal call's row, output and lse, bit for bit."""
    q, k, v = problem(seed)
    variant = variants(4, 7)[name]
    assert mismatches(q, k, v, variant, [1] * 7) == []


@pytest.mark.parametrize("seed", range(6))
def test_learned_sinks_and_gqa(seed):
    q, k, v = problem(seed)
    for name in ("causal", "window softcap alibi"):
        assert mismatches(q, k, v, variants(4, 7)[name], [1] * 7, sinks=SINKS) == []


@pytest.mark.parametrize("seed", range(4))
def test_without_gqa(seed):
    q, k, v = problem(seed, H=2, Hkv=2)
    assert mismatches(q, k, v, variants(2, 7)["alibi"], [1] * 7, enable_gqa=False) == []


@pytest.mark.parametrize("steps", [[3, 1, 1, 2], [7], [1, 4, 2], [2, 2, 2, 1]])
def test_chunked_prefill_equals_the_full_call(steps):
    """Appending T tokens and attending T queries (bottom-right inside the chunk) is exact too."""
    q, k, v = problem(11)
    for name in ("causal", "window softcap alibi", "documents"):
        assert mismatches(q, k, v, variants(4, 7)[name], steps) == [], (name, steps)


def test_a_prefix_lm_prefix_is_prefilled_as_one_chunk():
    """The prefix's queries see keys after them: prefill it whole, then decode one at a time."""
    q, k, v = problem(2)
    assert mismatches(q, k, v, PrefixLM(3), [3, 1, 1, 1, 1]) == []
    # one token at a time, query 0 would miss keys 1 and 2 of its prefix: not the full row
    assert mismatches(q, k, v, PrefixLM(3), [1] * 7)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("seed", range(4))
def test_rope_at_the_true_position_equals_rotating_the_full_sequence(pairing, seed):
    """Rotate each new token's q and k at cache.positions(1); equal to rotating all S rows."""
    q, k, v = problem(seed, E=4)
    S, alibi = 7, variants(4, 7)["alibi"]
    q_rot = scratch.rotary(q, range(S), pairing=pairing)
    k_rot = scratch.rotary(k, range(S), pairing=pairing)
    full, full_lse = full_call(q_rot, k_rot, v, alibi, enable_gqa=True)
    steps = decode_with_rope(q, k, v, alibi, pairing, lambda cache: cache.positions(1))
    assert [out for out, _ in steps] == [rows(full, t, t + 1) for t in range(S)]
    assert [lse for _, lse in steps] == [
        [[h[t : t + 1] for h in b] for b in full_lse] for t in range(S)
    ]
    # plant: every token rotated as if at position 0; the rows differ from the full call
    planted = decode_with_rope(q, k, v, alibi, pairing, lambda cache: [0])
    assert [out for out, _ in planted] != [rows(full, t, t + 1) for t in range(S)]


def decode_with_rope(q, k, v, variant, pairing, positions_of) -> list:
    """One token at a time: rotate its q and k at positions_of(cache), append, attend."""
    cache, found = scratch.KVCache(), []
    for t in range(len(q[0][0])):
        where = positions_of(cache)
        k_t = scratch.rotary(rows(k, t, t + 1), where, pairing=pairing)
        q_t = scratch.rotary(rows(q, t, t + 1), where, pairing=pairing)
        cache.append(k_t, rows(v, t, t + 1))
        found.append(cache.attend(q_t, **mods(variant), enable_gqa=True, return_lse=True))
    return found


# ---------------------------------------------------------------- planted mistakes fail


def test_planted_top_left_fails(monkeypatch):
    """Plant: every decode query taken at position 0 (top-left); steps after the first differ."""
    q, k, v = problem(1)
    monkeypatch.setattr(scratch.decode.attention, "query_offset", lambda L, S: 0)
    found = mismatches(q, k, v, variants(4, 7)["causal"], [1] * 7)
    assert found and "position 0" not in " ".join(found)


def test_planted_score_positions_not_offset_fails(monkeypatch):
    """Plant: the mask sees true positions but the score_mod row indices; ALiBi's lse and the
    bias table's clamped distances give it away."""
    real = scratch.decode.attention.at_positions

    def planted(mod, q_offset, kv_offset=0, batch=None):
        shifted, unshifted = real(mod, q_offset, kv_offset, batch), real(mod, 0, kv_offset, batch)
        if mod is None:
            return None
        return lambda *args: (unshifted if len(args) == 5 else shifted)(*args)

    q, k, v = problem(4)
    assert mismatches(q, k, v, variants(4, 7)["alibi"], [1] * 7) == []
    monkeypatch.setattr(scratch.decode.attention, "at_positions", planted)
    for name in ("alibi", "bias table"):
        assert mismatches(q, k, v, variants(4, 7)[name], [1] * 7), name
    assert mismatches(q, k, v, variants(4, 7)["causal"], [1] * 7) == []  # no score_mod


# ---------------------------------------------------------------- bad input, named


def test_the_cache_refuses_bad_input_by_name():
    q, k, v = problem(0, 1, 2, 2, 3)
    cache = scratch.KVCache()
    with pytest.raises(ValueError, match="query: the cache is empty"):
        cache.attend(rows(q, 0, 1))
    with pytest.raises(ValueError, match=r"value: expected \(B, Hkv, T\)"):
        cache.append(rows(k, 0, 1), rows(v, 0, 2))
    with pytest.raises(ValueError, match="key: expected 4 dims"):
        cache.append(k[0], v[0])
    cache.append(rows(k, 0, 1), rows(v, 0, 1))
    assert cache.seq_len == 1 and cache.positions(2) == [1, 2]
    with pytest.raises(ValueError, match=r"key, value: expected \(B, Hkv, E, Ev\)"):
        cache.append([[k[0][0][:1]]], [[v[0][0][:1]]])  # one kv head, the cache holds two
    with pytest.raises(ValueError, match="query: 2 queries cannot be the last positions of 1"):
        cache.attend(rows(q, 0, 2))
    assert cache.seq_len == 1  # refused input leaves the cache as it was
