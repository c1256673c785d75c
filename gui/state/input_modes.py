"""The window's three input modes, and a session switched between them: projections (q = x @ w_q,
...), direct q/k/v, and self (q = k = v = x), keeping every value that fits."""

from __future__ import annotations

import dataclasses

import scratch
from gui.state.session import Matrix, Session, resize_matrix, with_drawn_size, with_fitting_grad


def with_mode(s: Session, mode: str) -> Session:
    """Switch between projections, direct q/k/v and q = k = v = x, keeping what fits."""
    if mode == s.mode:
        return s
    return with_fitting_grad(_in_mode(s, mode))


def _in_mode(s: Session, mode: str) -> Session:
    """`s` switched to `mode` (with_mode's work, before the given dO is checked)."""
    L, S = s.num_tokens, s.num_keys
    if mode == "self":
        return dataclasses.replace(
            s,
            mode=mode,
            key=None,
            value=None,
            w_q=None,
            w_k=None,
            w_v=None,
            key_tokens=s.tokens,
            variant=with_drawn_size(s.variant, L, L),
            num_kv_heads=s.num_heads,
        )
    if mode == "qkv":  # q (L, H*d_k), k (S, Hkv*d_k), v (S, Hkv*d_v)
        heads = (s.num_heads, s.num_kv_heads)
        shapes = scratch.shapes_for_heads(L, S, heads, s.d_k, s.d_v)
        key = s.key if s.key is not None else s.query
        return dataclasses.replace(
            s,
            mode=mode,
            query=resize_matrix(s.query, *shapes["query"]),
            key=resize_matrix(key, *shapes["key"]),
            value=resize_matrix(s.value if s.value is not None else key, *shapes["value"]),
            w_q=None,
            w_k=None,
            w_v=None,
        )
    # to projections: identity weights, so the example computes exactly what it did before;
    # q/k/v's K and V become the key and value inputs when they have one width (d_k == d_v)
    cross = s.mode == "qkv" and len(s.key[0]) == len(s.value[0])
    d_in = len(s.key[0]) if cross else s.d_model
    return dataclasses.replace(
        s,
        mode=mode,
        key=s.key if cross else None,
        value=s.value if cross else None,
        key_tokens=s.key_tokens if cross else s.tokens,
        variant=s.variant if cross else with_drawn_size(s.variant, L, L),
        w_q=_identity(s.d_model),  # (d_model, H*d_k): d_model = H*d_k in both other modes
        w_k=_identity(d_in),  # (d_in, Hkv*d_k)
        w_v=_identity(d_in),  # (d_in, Hkv*d_v)
        num_kv_heads=s.num_kv_heads if cross else s.num_heads,
    )


def _identity(n: int) -> Matrix:
    """The (n, n) identity matrix."""
    return tuple(tuple(1.0 if r == c else 0.0 for c in range(n)) for r in range(n))
