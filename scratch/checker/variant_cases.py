"""The variant checker's seeded cases: one attention variant (or a combination) per case.

Every case is 4-D, FlexAttention's layout: q (1, H, L, E), k (1, Hkv, S, E), v (1, Hkv, S, Ev).
Every rule is aligned bottom-right, as FlashAttention's `causal` and `window_size`: query i sits
at position i + S - L (the queries are the last L positions; a decode step has L < S), key j at
position j. No case leaves a row without keys, so no masked-rows policy is needed.

A registered mask (scratch.variants.mask_variants) that no hand-written field below covers gets
one case of its own, derived from its declaration: its parameters at their defaults, the
queries the last 20 of 24 positions (`registered_cases`); its feature is its key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..variants import Variant, mask_variants
from .cases import Case

# what `require=` may name for check_variants, and how the verdict names each
VARIANT_FEATURES = {
    "causal": "causal (bottom-right)",
    "window": "sliding window",
    "softcap": "softcap",
    "alibi": "ALiBi",
    "sinks": "learned sinks",
    "documents": "documents (cu_seqlens)",
    "prefix": "prefix-LM",
    "chunked": "chunked local attention",
    "decode": "decode (L < S)",
    "rope": "RoPE",
    "gqa": "GQA",
}
# the masks written out above by hand (their own fields and mistakes); the others are derived
WRITTEN = ("causal", "window", "documents", "prefix", "chunked")
DERIVED = {key: cls for key, cls in mask_variants().items() if key not in WRITTEN}
VARIANT_FEATURES.update({key: cls.label for key, cls in DERIVED.items()})


@dataclass(frozen=True)
class VariantCase(Case):
    """A case with a variant's parameters (None / False: not used); gqa follows the shapes."""

    causal: bool = False  # key j seen iff j <= i + S - L
    window: tuple[int, int] | None = None  # (left, right): FlashAttention's window_size
    softcap: float | None = None  # cap * tanh(score / cap), on the scaled score
    alibi: bool = False  # + slope[h] * (j - i), the paper's slopes for H heads (L == S only)
    sinks: bool = False  # one seeded sink logit per query head in each row's denominator
    cu_seqlens: tuple[int, ...] | None = None  # packed documents (L == S only)
    prefix: int | None = None  # prefix-LM: j < prefix or j <= i + S - L
    chunk: int | None = None  # chunked local: j // chunk == (i + S - L) // chunk
    rotary: str | None = None  # RoPE pairing, 'half' or 'interleaved' (q, k arrive unrotated)
    q_size: float = 1.0  # spread of q (softcap cases: large scores, so the cap matters)
    # a registered mask: (key, ((parameter, value), ...)), bottom-right as every rule here
    registered_mask: tuple[str, tuple[tuple[str, object], ...]] | None = None

    def __post_init__(self):
        object.__setattr__(self, "gqa", self.q[1] != self.k[1])  # more query heads than kv heads
        L, S = self.q[2], self.k[2]
        if (self.alibi or self.cu_seqlens) and L != S:
            raise ValueError(f"{self.name}: ALiBi and documents cases need L == S")
        if self.cu_seqlens and self.cu_seqlens[-1] != S:
            raise ValueError(f"{self.name}: cu_seqlens must end at S = {S}")

    @property
    def shift(self) -> int:
        """Where the diagonal sits: query i at position i + shift (S - L, bottom-right)."""
        return self.k[2] - self.q[2]

    def features(self, dtype: str = "") -> tuple[str, ...]:
        """The features (keys of VARIANT_FEATURES) the case uses."""
        on = {
            "causal": self.causal,
            "window": self.window is not None,
            "softcap": self.softcap is not None,
            "alibi": self.alibi,
            "sinks": self.sinks,
            "documents": self.cu_seqlens is not None,
            "prefix": self.prefix is not None,
            "chunked": self.chunk is not None,
            "decode": self.shift > 0,
            "rope": self.rotary is not None,
            "gqa": self.gqa,
        }
        if self.registered_mask is not None:
            on[self.registered_mask[0]] = True
        return tuple(name for name, used in on.items() if used)

    def registered(self, shift: int | None = None, changed: tuple = ()) -> Variant | None:
        """The registered mask (None: none) at the diagonal `shift` (None: the case's), with
        the parameters in `changed` ((name, value), ...) replacing the case's."""
        if self.registered_mask is None:
            return None
        key, params = self.registered_mask
        L, S = self.q[2], self.k[2]
        shift = self.shift if shift is None else shift
        return mask_variants()[key].chosen(dict(params + changed), L, S, shift, S)

    def options(self) -> str:
        """The variant in words, for the report."""
        words = []
        if self.causal:
            words.append("causal")
        if self.window is not None:
            words.append(f"window_size={self.window}")
        if self.softcap is not None:
            words.append(f"softcap={self.softcap:g}")
        if self.alibi:
            words.append("ALiBi")
        if self.sinks:
            words.append("sinks")
        if self.cu_seqlens is not None:
            words.append(f"cu_seqlens={list(self.cu_seqlens)}")
        if self.prefix is not None:
            words.append(f"prefix={self.prefix}")
        if self.chunk is not None:
            words.append(f"chunk={self.chunk}")
        if self.rotary is not None:
            words.append(f"RoPE {self.rotary}")
        if self.registered_mask is not None:
            values = ", ".join(f"{name}={value}" for name, value in self.registered_mask[1])
            words.append(f"{self.registered_mask[0]}({values})")
        if self.gqa:
            words.append("GQA")
        if self.shift > 0:
            words.append(f"decode (L < S, shift {self.shift})")
        return ", ".join(words) or "-"


def _shapes(H: int, Hkv: int, L: int, S: int, E: int, Ev: int | None = None) -> dict:
    """q, k, v shapes of one case."""
    return {"q": (1, H, L, E), "k": (1, Hkv, S, E), "v": (1, Hkv, S, Ev or E)}


def variant_cases(dtype: str) -> list[VariantCase]:
    """The standard variant cases: each variant alone, in a decode step, and combined."""
    c = VariantCase
    big = 3.0  # softcap cases: scores of a few caps, so tanh bends them
    return [
        c("window-both-sides", **_shapes(2, 2, 20, 20, 16, 8), window=(3, 2)),
        c("window-causal", **_shapes(2, 2, 24, 24, 16), window=(5, 0)),
        c("window-tiles", **_shapes(1, 1, 70, 70, 32), window=(17, 0)),
        c("window-decode", **_shapes(2, 2, 4, 40, 16), window=(9, 0)),
        c("softcap", **_shapes(2, 2, 12, 16, 16), softcap=2.0, q_size=big),
        c("softcap-causal", **_shapes(2, 2, 16, 16, 16), causal=True, softcap=2.0, q_size=big),
        c("alibi-causal", **_shapes(4, 4, 16, 16, 16), causal=True, alibi=True),
        c("sinks", **_shapes(2, 2, 12, 16, 16), sinks=True),
        c("documents", **_shapes(2, 2, 20, 20, 16), cu_seqlens=(0, 6, 13, 20)),
        c("documents-causal", **_shapes(2, 2, 20, 20, 16), causal=True, cu_seqlens=(0, 7, 11, 20)),
        c("prefix-lm", **_shapes(2, 2, 16, 16, 16), prefix=5),
        c("chunked-causal", **_shapes(2, 2, 30, 30, 16), causal=True, chunk=8),
        c("decode-causal", **_shapes(2, 2, 3, 29, 16), causal=True),
        c("decode-split-kv-gqa", **_shapes(4, 2, 2, 96, 32), causal=True),  # packed-GQA decode
        c("rope-half", **_shapes(2, 2, 12, 12, 16), causal=True, rotary="half"),
        c("rope-interleaved", **_shapes(2, 2, 12, 12, 16), causal=True, rotary="interleaved"),
        c("rope-decode", **_shapes(2, 2, 2, 20, 16), causal=True, rotary="half"),
        c(
            "window-softcap-gqa-sinks",
            **_shapes(4, 2, 24, 24, 16),
            window=(7, 0),
            softcap=2.0,
            sinks=True,
            q_size=big,
        ),
        c("alibi-window", **_shapes(4, 4, 20, 20, 16), window=(6, 0), alibi=True),
        c("documents-window", **_shapes(2, 2, 24, 24, 16), cu_seqlens=(0, 9, 24), window=(4, 0)),
        *registered_cases(),
    ]


def registered_cases() -> list[VariantCase]:
    """One case per registered mask not written out above: its parameters at their defaults,
    the queries the last 20 of 24 positions (the alignment shift 4 matters)."""
    return [
        VariantCase(
            key.replace("_", "-"),
            **_shapes(2, 2, 20, 24, 16),
            registered_mask=(key, tuple((p.key, p.default) for p in cls.params)),
        )
        for key, cls in DERIVED.items()
    ]


def rotary_tables(S: int, rotary_dim: int, base: float = 10000.0) -> tuple[list, list]:
    """FlashAttention's rotary_cos, rotary_sin: (S, rotary_dim / 2), position p, pair m."""
    theta = [base ** (-2.0 * m / rotary_dim) for m in range(rotary_dim // 2)]
    cos = [[math.cos(p * t) for t in theta] for p in range(S)]
    sin = [[math.sin(p * t) for t in theta] for p in range(S)]
    return cos, sin


__all__ = [
    "DERIVED",
    "VARIANT_FEATURES",
    "VariantCase",
    "registered_cases",
    "rotary_tables",
    "variant_cases",
]
