"""A KV cache that grows a few tokens at a time, and decodes the newest queries against it.

The loop of a decoder: rotate the new token's q and k at its true position
(`scratch.rotary(x, cache.positions(1))`), `append` its k and v, then `attend` with its q.
Each step's row is computed exactly as the same row of one full causal call over the whole
sequence (same scores, same fsum), so "incremental equals full" holds bit for bit
(tests/test_decode_cache.py). Appending T > 1 tokens and attending T queries is a chunked
prefill (needed for a prefix-LM's prefix, whose queries see keys after them).
"""

from __future__ import annotations

from scratch.decode.attention import decode_attention, key_value
from scratch.ops.validate import check_positive_int


class KVCache:
    """Keys (B, Hkv, S, E) and values (B, Hkv, S, Ev) of the S tokens appended so far.

    Examples:
        >>> from scratch import KVCache
        >>> cache = KVCache()
        >>> cache.append([[[[1.0, 0.0]]]], [[[[2.0]]]])  # one token: (B, Hkv, T, E), (.., Ev)
        >>> cache.seq_len, cache.positions(2)
        (1, [1, 2])
    """

    def __init__(self) -> None:
        self.key: list = []  # (B, Hkv, S, E) once a token is appended
        self.value: list = []  # (B, Hkv, S, Ev)
        self.sizes: tuple[int, int, int, int] | None = None  # (B, Hkv, E, Ev)

    @property
    def seq_len(self) -> int:
        """S, the number of tokens cached (0 when empty)."""
        return len(self.key[0][0]) if self.key else 0

    def positions(self, T: int = 1) -> list[int]:
        """The true positions of the next T tokens (what scratch.rotary needs for them).

        Args:
            T: how many tokens come next (an integer >= 1).
        """
        T = check_positive_int(T, "T")
        return list(range(self.seq_len, self.seq_len + T))

    def append(self, key: object, value: object) -> None:
        """Add T tokens' keys and values to the cache (ValueError if the sizes differ from it).

        Args:
            key: (B, Hkv, T, E), nested lists.
            value: (B, Hkv, T, Ev).
        """
        k, v, (B, Hkv, _, E, Ev) = key_value(key, value, "T")
        if self.sizes is not None and (B, Hkv, E, Ev) != self.sizes:
            raise ValueError(
                f"key, value: expected (B, Hkv, E, Ev) = {self.sizes} as the cache holds, "
                f"found {(B, Hkv, E, Ev)}"
            )
        if self.sizes is None:
            self.sizes = (B, Hkv, E, Ev)
            self.key = [[[] for _ in range(Hkv)] for _ in range(B)]
            self.value = [[[] for _ in range(Hkv)] for _ in range(B)]
        for b in range(B):
            for h in range(Hkv):
                self.key[b][h].extend(k[b][h])  # (S, E) + (T, E) -> (S + T, E)
                self.value[b][h].extend(v[b][h])  # (S, Ev) + (T, Ev) -> (S + T, Ev)

    def attend(self, query: object, **options: object) -> list | tuple[list, list]:
        """decode_attention of the newest L tokens' queries over the cache.

        Args:
            query: (B, H, L, E), nested lists.
            **options: decode_attention's (score_mod, mask_mod, scale, enable_gqa, return_lse,
                sinks), the mods written in true positions.

        Returns:
            output (B, H, L, Ev); (output, lse) with return_lse.
        """
        if not self.seq_len:
            raise ValueError("query: the cache is empty; append the tokens' key and value first")
        return decode_attention(query, self.key, self.value, **options)


__all__ = ["KVCache"]
