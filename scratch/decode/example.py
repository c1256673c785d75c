"""One decode step as a worked example: the newest token's query against the cached keys.

At decode step n the cache holds the keys and values of tokens 0 .. n-1 and token n-1 is the
one query: L = 1 query at position n - 1, S = n keys (bottom-right alignment puts the query at
the last position, so a causal or windowed variant must be aligned bottom-right, and RoPE turns
the query by its true position n - 1). Growing n one token at a time replays a generation.
"""

from __future__ import annotations

from scratch.core.example import Example


def decode_example(example: Example, n: int) -> Example:
    """`example` (self-attention: the keys are the queries' tokens) at decode step n.

    Args:
        example: a self-attention Example of L tokens.
        n: the step, 1..L: the cache holds the first n tokens, the query is token n - 1.

    Returns:
        The Example of that step.
    """
    L = len(example.x)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= L:
        raise ValueError(f"decode: expected a cache of 1 to {L} tokens, found {n!r}")
    key = example.x if example.key is None else example.key
    if len(key) != L:
        raise ValueError(
            f"decode: needs as many keys as queries (one sequence), found L={L}, S={len(key)}"
        )
    tokens = list(example.tokens) if example.tokens is not None else [f"t{i}" for i in range(L)]
    return Example(
        example.x[n - 1 : n],  # (1, d_model): the newest token
        key[:n],  # (n, d_key): the cache
        None if example.value is None else example.value[:n],
        dict(example.params),
        tokens[n - 1 : n],
        tokens[:n],
        example.num_heads,
        example.num_kv_heads,
    )


__all__ = ["decode_example"]
