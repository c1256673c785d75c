"""Hypothesis strategies for attention inputs: checker cases drawn at random, each run with
scratch.testing.assert_attention_close (the inputs, bounds and diagnosis of scratch.check).

    @given(case=strategies.cases(), seed=st.integers(0, 2**16))
    def test_my_kernel(case, seed):
        assert_attention_close(my_attention, case, seed=seed)

`shapes` draws (q, k, v) shapes as hypothesis.extra.numpy's array_shapes draws one shape;
`cases` a forward case (leading dims, L != S, Ev != E, GQA, masks, causal, scale);
`variant_cases` a variant case (window, softcap, ALiBi, sinks, documents, prefix-LM, chunks,
RoPE, decode, GQA). Needs hypothesis, a development dependency (the `dev` extra); scratch and
the rest of scratch.testing do not.
"""

from __future__ import annotations

try:
    from hypothesis import strategies as st
except ImportError as exc:  # scratch never installs hypothesis itself
    raise ImportError(
        "scratch.testing.strategies needs hypothesis, a development dependency scratch does not "
        "install: pip install 'scratch-attention[dev]' (or pip install hypothesis)"
    ) from exc

from scratch.checker.cases import Case
from scratch.checker.variant_cases import VariantCase, mask

Shapes = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
MASKS = ("none", "bool", "float", "empty-row", "causal")  # a case has one (or none)
VARIANTS = ("causal", "window", "prefix", "documents", "chunked", "softcap", "alibi", "sinks",
            "rope", "decode", "gqa")  # fmt: skip


def _sizes(draw, max_batch: int, max_heads: int, gqa: bool, lead: bool) -> tuple:
    """(leading dims of q, of k and v): none, (H,) or (B, H), kv heads dividing H with GQA."""
    dims = draw(st.integers(0, 2)) if lead else 0
    if dims == 0:
        return (), ()
    H = draw(st.integers(1, max_heads))
    Hkv = draw(st.sampled_from([d for d in range(1, H + 1) if H % d == 0])) if gqa else H
    batch = (draw(st.integers(1, max_batch)),) if dims == 2 else ()
    return (*batch, H), (*batch, Hkv)


@st.composite
def shapes(
    draw, *, max_batch: int = 2, max_heads: int = 4, max_len: int = 12, max_dim: int = 16,
    gqa: bool = True, lead: bool = True,
) -> Shapes:  # fmt: skip
    """(q, k, v) shapes: (..., H, L, E), (..., Hkv, S, E), (..., Hkv, S, Ev); leading dims
    (none, heads, batch and heads) when `lead`, fewer kv heads than query heads when `gqa`."""
    q_lead, kv_lead = _sizes(draw, max_batch, max_heads, gqa, lead)
    L, S = draw(st.integers(1, max_len)), draw(st.integers(1, max_len))
    E, Ev = draw(st.integers(1, max_dim)), draw(st.integers(1, max_dim))
    return (*q_lead, L, E), (*kv_lead, S, E), (*kv_lead, S, Ev)


@st.composite
def cases(
    draw, *, max_batch: int = 2, max_heads: int = 4, max_len: int = 12, max_dim: int = 16,
    gqa: bool = True, masks: bool = True, scale: bool = True,
) -> Case:  # fmt: skip
    """A forward case of drawn shapes with one of: no mask, a bool or float mask, a bool mask
    with a fully masked row, is_causal (when `masks`); a custom scale or none."""
    q, k, v = draw(shapes(max_batch=max_batch, max_heads=max_heads, max_len=max_len,
                          max_dim=max_dim, gqa=gqa))  # fmt: skip
    rule = draw(st.sampled_from(MASKS if masks else ("none",)))
    if rule == "empty-row" and q[-2] < 2:  # row 1 is the masked one
        rule = "bool"
    size = draw(st.none() | st.floats(0.05, 2.0)) if scale else None
    return Case(
        "drawn",
        q,
        k,
        v,
        mask="none" if rule == "causal" else rule,
        is_causal=rule == "causal",
        scale=size,
        gqa=len(q) > 2 and q[-3] != k[-3],
    )


def variant_cases(
    *, max_heads: int = 4, max_len: int = 24, max_dim: int = 16,
    variants: tuple[str, ...] = VARIANTS,
) -> st.SearchStrategy[VariantCase]:  # fmt: skip
    """A variant case (q (1, H, L, E), k (1, Hkv, S, E), v (1, Hkv, S, Ev)) with a drawn
    combination of `variants`: at most one diagonal rule (causal, window or prefix), documents
    and ALiBi when L == S, chunks, softcap, sinks, RoPE (E even), decode (L < S), GQA."""
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise ValueError(f"variants: expected names from {', '.join(VARIANTS)}, found {unknown}")
    return _variant_cases(max_heads, max_len, max_dim, tuple(variants))


@st.composite
def _variant_cases(
    draw, max_heads: int, max_len: int, max_dim: int, variants: tuple
) -> VariantCase:
    """variant_cases, its settings checked."""
    on = set(draw(st.lists(st.sampled_from(variants), unique=True)))
    H = draw(st.integers(1, max_heads))
    Hkv = H
    if "gqa" in on and H > 1:
        Hkv = draw(st.sampled_from([d for d in range(1, H) if H % d == 0]))
    S = draw(st.integers(2, max_len))
    L = draw(st.integers(1, S - 1)) if "decode" in on else S
    E = 2 * draw(st.integers(1, max_dim // 2))  # even: RoPE turns pairs
    Ev = draw(st.integers(1, max_dim))
    found = []
    diagonal = draw(st.sampled_from(sorted(on & {"causal", "window", "prefix"}) or [None]))
    if diagonal == "causal":
        found.append(mask("causal"))
    elif diagonal == "window":
        found.append(mask("window", draw(st.integers(0, S)), draw(st.integers(0, S))))
    elif diagonal == "prefix":
        found.append(mask("prefix", draw(st.integers(1, S))))
    if "documents" in on and L == S and S > 2:
        ends = draw(st.lists(st.integers(1, S - 1), min_size=1, max_size=3, unique=True))
        found.append(mask("documents", (0, *sorted(ends), S)))
    if "chunked" in on:
        found.append(mask("chunked", draw(st.integers(1, S))))
    cap = draw(st.sampled_from([1.0, 2.0, 5.0])) if "softcap" in on else None
    return VariantCase(
        "drawn-variant",
        (1, H, L, E),
        (1, Hkv, S, E),
        (1, Hkv, S, Ev),
        masks=tuple(found),
        softcap=cap,
        alibi="alibi" in on and L == S,
        sinks="sinks" in on,
        rotary=draw(st.sampled_from(["half", "interleaved"])) if "rope" in on else None,
        q_size=3.0 if cap is not None else 1.0,
    )


__all__ = ["MASKS", "VARIANTS", "cases", "shapes", "variant_cases"]
