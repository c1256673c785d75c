"""Split-KV (flash-decoding): attention over key splits, then the partial results merged.

Each split n of the keys [lo, hi) gives a partial (output_n, lse_n) over its keys alone, the
queries and keys at their true positions (scratch.decode.attention's convention: q_idx = S - L + i,
kv_idx = lo + j), with no sink. The merge, per query row:
    lse    = logsumexp_n(lse_n)                          (+ the sink logit as one more term)
    output = sum_n exp(lse_n - lse) * output_n
because output_n = sum_{j in n} exp(s_j - lse_n) v_j. A split where the row sees no key has
lse_n = -inf and weight 0; every split empty gives output 0, lse -inf (or lse = sink).

How exact. The merged row is not bit-equal to the full row in general (each output_n and
lse_n is rounded before the merge); one split is (exp(0) = 1, log(1) = 0). The bound, to first
order in u = 2^-53, with exp and log within 1 ulp (relative 2u), every sum an fsum (relative u),
every subtraction and product rounded once (relative u), and the scores s_j identical in both
computations. Notation: p_j = exp(s_j - lse) the exact weights, W_c = sum_j p_j |v_j[c]|,
T the largest |lse| or |lse_n|, E the largest |s_j - lse|, |s_j - lse_n| or |lse_n - lse| (finite
ones), n the keys seen, k the splits (a learned sink counts as one more of each).
  1. lse of m terms, m' + log(fsum(exp(s - m'))) with m' the largest: each term is off by
     u (m' - s) + 2u relatively; weighted by p, sum_j p_j (m' - s_j) <= entropy(p) <= ln m,
     so the sum is off by u (ln m + 3), log adds 2u ln m, the last addition u |lse|:
     |lse error| <= u (T + 3 ln m + 3).
  2. A weight exp(s_j - lse~) is off relatively by |lse error| + u E + 2u; with the product and
     the fsum, the full row's output is off by u W_c (T + E + 3 ln n + 7).
  3. Merge: the lse of the k partial lses is off by max_n |lse_n error| + u (T + 3 ln k + 3);
     each factor exp(lse_n - lse~) by both lse errors + u E + 2u; sum_n P_n W_c,n = W_c (P_n
     the exact share of split n) so the merged output is off by u W_c (4T + 2E + 9 ln n +
     3 ln k + 20).
Hence |merged - full| <= u W_c (5T + 3E + 12 ln n + 3 ln k + 27), and for lse
u (3T + 6 ln n + 3 ln k + 9); tests/test_decode_split.py measures both against these.
"""

from __future__ import annotations

from collections.abc import Callable
from math import exp, fsum, inf, log

from scratch.core.options import FlexOptions
from scratch.decode.attention import attend_at, decode_door, decode_inputs, four_dims, query_offset
from scratch.flex.forward import FlexInputs
from scratch.ops.validate import as_tensor, check_positive_int
from scratch.variants.sinks import sink_logits

Partial = tuple[list, list]  # (output (B, H, L, Ev), lse (B, H, L))


def split_bounds(S: int, num_splits: int) -> list[tuple[int, int]]:
    """num_splits key ranges [lo, hi) of ceil(S / num_splits) keys each (the last may be short
    or empty)."""
    S, n = check_positive_int(S, "S"), check_positive_int(num_splits, "num_splits")
    size = -(-S // n)
    return [(min(s * size, S), min(s * size + size, S)) for s in range(n)]


def split_kv_partials(
    query: object,
    key: object,
    value: object,
    num_splits: int,
    score_mod: Callable[..., float] | None = None,
    mask_mod: Callable[..., bool] | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> list[Partial]:
    """Each split's (output, lse) over its own keys, query (B, H, L, E) the last L of S keys."""
    options = FlexOptions(score_mod, None, scale, enable_gqa, mask_mod=mask_mod)
    return partials_of(query, key, value, num_splits, options)


def partials_of(
    query: object, key: object, value: object, num_splits: int, options: FlexOptions
) -> list[Partial]:
    """split_kv_partials on one FlexOptions (its sinks wait for the merge)."""
    x = decode_inputs(query, key, value, options)
    B, H, Hkv, L, S, E, Ev = x.shape
    partials = []
    for lo, hi in split_bounds(S, num_splits):
        if lo == hi:  # no key at all: weight 0 in the merge
            zeros = [[[[0.0] * Ev for _ in range(L)] for _ in range(H)] for _ in range(B)]
            partials.append((zeros, [[[-inf] * L for _ in range(H)] for _ in range(B)]))
            continue
        keys = [[kv[lo:hi] for kv in k_b] for k_b in x.k]  # (B, Hkv, hi - lo, E)
        values = [[kv[lo:hi] for kv in v_b] for v_b in x.v]  # (B, Hkv, hi - lo, Ev)
        part = FlexInputs(
            x.q, keys, values, (B, H, Hkv, L, hi - lo, E, Ev), x.scale, None, None, None
        )
        partials.append(
            attend_at(part, query_offset(L, S), lo, options.score_mod, options.mask_mod)
        )
    return partials


def merge_rows(outputs: list[list[float]], lses: list[float], sink: float | None):
    """One row's merge: (output, lse) from the splits' outputs (k, Ev) and lses (k)."""
    terms = lses + ([] if sink is None else [sink])
    top = max(terms)
    Ev = len(outputs[0])
    if top == -inf:  # every split empty: the row saw no key
        return [0.0] * Ev, -inf
    # lse = logsumexp of the partial lses (subtract the largest so exp never overflows)
    lse = top + log(fsum(exp(t - top) for t in terms))
    factors = [exp(t - lse) for t in lses]  # each split's share of the full softmax
    return [fsum(f * out[c] for f, out in zip(factors, outputs)) for c in range(Ev)], lse


def merge_partials(partials: list[Partial], sinks: object = None) -> Partial:
    """The splits' partials merged: output (B, H, L, Ev), lse (B, H, L); sinks join here.

    Args:
        partials: (output (B, H, L, Ev), lse (B, H, L)) of each split of the keys.
        sinks: one learned sink logit per query head, or None.

    Returns:
        (output, lse) as one attention over every split's keys gives them.
    """
    if not isinstance(partials, (list, tuple)) or not partials:
        raise ValueError("partials: expected a non-empty list of (output, lse) pairs")
    outs, lses, shape = [], [], None
    for n, pair in enumerate(partials):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"partials[{n}]: expected a pair (output, lse)")
        out, (B, H, L, Ev) = four_dims(pair[0], f"partials[{n}] output", "(B, H, L, Ev)")
        lse, lse_shape = as_tensor(pair[1], f"partials[{n}] lse", min_dims=0)
        shape = shape or (B, H, L, Ev)
        if (B, H, L, Ev) != shape or lse_shape != shape[:3]:
            raise ValueError(
                f"partials[{n}]: expected output {shape} and lse {shape[:3]} as partials[0], "
                f"found {(B, H, L, Ev)} and {lse_shape}"
            )
        outs.append(out)
        lses.append(lse)
    B, H, L, _ = shape
    logits = sink_logits(sinks, H)
    output = [[[None] * L for _ in range(H)] for _ in range(B)]
    lse = [[[None] * L for _ in range(H)] for _ in range(B)]
    for b in range(B):
        for h in range(H):
            sink = None if logits is None else logits[h]
            for i in range(L):
                output[b][h][i], lse[b][h][i] = merge_rows(
                    [o[b][h][i] for o in outs], [t[b][h][i] for t in lses], sink
                )
    return output, lse


@decode_door
def split_kv_attention(
    query: object, key: object, value: object, num_splits: int, options: FlexOptions
) -> Partial:
    """decode_attention computed as flash-decoding does: num_splits partials, then the merge.

    Args:
        query: q (B, H, L, E).
        key: k (B, Hkv, S, E).
        value: v (B, Hkv, S, Ev).
        num_splits: how many key ranges are attended apart, then merged.

    Returns:
        output (B, H, L, Ev), or (output, lse (B, H, L)) with return_lse=True.
    """
    return merge_partials(partials_of(query, key, value, num_splits, options), options.sinks)


__all__ = ["merge_partials", "split_bounds", "split_kv_attention", "split_kv_partials"]
