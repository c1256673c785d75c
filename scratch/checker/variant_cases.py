"""The variant checker's seeded cases: one attention variant (or a combination) per case.

Every case is 4-D, FlexAttention's layout: q (1, H, L, E), k (1, Hkv, S, E), v (1, Hkv, S, Ev).
Every rule is aligned bottom-right, as FlashAttention's `causal` and `window_size`: query i sits
at position i + S - L (the queries are the last L positions; a decode step has L < S), key j at
position j. No case leaves a row without keys, so no masked-rows policy is needed.

A case's masks are registered masks (scratch.variants.mask_variants) with their declared
parameters; one without hand-written mistakes gets one case of its own, derived from its
declaration: its parameters at their defaults, the queries the last 20 of 24 positions
(`registered_cases`); its feature is its key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scratch.checker.cases import Case
from scratch.variants import Variant, mask_variants

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
    "scale": "scale",
}
# the masks with hand-written mistakes (variant_diagnosis); every other registered mask gets a
# case of its own and its mistakes derived from its declaration
WRITTEN = ("causal", "window", "documents", "prefix", "chunked")
DERIVED = {key: cls for key, cls in mask_variants().items() if key not in WRITTEN}
VARIANT_FEATURES.update({key: cls.label for key, cls in DERIVED.items()})
# how the report writes a hand-written mask's values (a derived one: key(name=value, ...))
WORDS = {"causal": "causal", "window": "window_size=({0}, {1})", "documents": "cu_seqlens={0}",
         "prefix": "prefix={0}", "chunked": "chunk={0}"}  # fmt: skip
Masks = tuple[tuple[str, tuple[tuple[str, object], ...]], ...]  # (key, ((param, value), ...))


def mask(key: str, *values: object) -> tuple[str, tuple[tuple[str, object], ...]]:
    """A registered mask (scratch.variants) with its declared parameters' values, in order."""
    params = mask_variants()[key].params
    if len(values) != len(params):
        raise ValueError(f"{key}: expected values for {[p.key for p in params]}, found {values}")
    return key, tuple((p.key, value) for p, value in zip(params, values))


def _value(key: str, doc: str) -> property:
    """A case's mask `key`'s one parameter value (None: the case has no such mask)."""
    return property(lambda self: (self.values(key) or (None,))[0], doc=doc)


@dataclass(frozen=True)
class VariantCase(Case):
    """A case with a variant's parameters (None / False: not used); gqa follows the shapes.

    `masks` are registered masks (scratch.variants) with their parameters, bottom-right as
    every rule here; the rest change the scores or the inputs."""

    masks: Masks = ()
    softcap: float | None = None  # cap * tanh(score / cap), on the scaled score
    alibi: bool = False  # + slope[h] * (j - i), the paper's slopes for H heads (L == S only)
    sinks: bool = False  # one seeded sink logit per query head in each row's denominator
    rotary: str | None = None  # RoPE pairing, 'half' or 'interleaved' (q, k arrive unrotated)
    q_size: float = 1.0  # spread of q (softcap cases: large scores, so the cap matters)

    def __post_init__(self):
        object.__setattr__(self, "gqa", self.q[1] != self.k[1])  # more query heads than kv heads
        L, S = self.q[2], self.k[2]
        if (self.alibi or self.cu_seqlens) and L != S:
            raise ValueError(f"{self.name}: ALiBi and documents cases need L == S")
        if self.cu_seqlens and self.cu_seqlens[-1] != S:
            raise ValueError(f"{self.name}: cu_seqlens must end at S = {S}")

    def values(self, key: str) -> tuple | None:
        """Mask `key`'s parameter values in declared order (None: the case has no such mask)."""
        found = dict(self.masks).get(key)
        return None if found is None else tuple(value for _, value in found)

    causal = property(
        lambda self: "causal" in dict(self.masks), doc="Key j seen iff j <= i + shift."
    )
    window = property(lambda self: self.values("window"), doc="(left, right): window_size.")
    cu_seqlens = _value("documents", "Packed documents (L == S only).")
    prefix = _value("prefix", "Prefix-LM: j < prefix or j <= i + shift.")
    chunk = _value("chunked", "Chunked local: j // chunk == (i + shift) // chunk.")

    @property
    def registered_mask(self) -> tuple[str, tuple[tuple[str, object], ...]] | None:
        """The mask without hand-written mistakes, (key, ((parameter, value), ...)), or None."""
        return next((m for m in self.masks if m[0] not in WRITTEN), None)

    @property
    def shift(self) -> int:
        """Where the diagonal sits: query i at position i + shift (S - L, bottom-right)."""
        return self.k[2] - self.q[2]

    def features(self, dtype: str = "") -> tuple[str, ...]:
        """The features (keys of VARIANT_FEATURES) the case uses."""
        on = {key: True for key, _ in self.masks} | {
            "softcap": self.softcap is not None,
            "alibi": self.alibi,
            "sinks": self.sinks,
            "decode": self.shift > 0,
            "rope": self.rotary is not None,
            "gqa": self.gqa,
            "scale": self.scale is not None,
        }
        return tuple(name for name in VARIANT_FEATURES if on.get(name))

    def mask_variant(self, key: str, shift: int | None = None, changed: tuple = ()) -> Variant:
        """Mask `key` as a scratch.variants object at the diagonal `shift` (None: the case's),
        with the parameters in `changed` ((name, value), ...) replacing the case's."""
        L, S = self.q[2], self.k[2]
        shift = self.shift if shift is None else shift
        return mask_variants()[key].chosen(dict(dict(self.masks)[key] + changed), L, S, shift, S)

    def registered(self, shift: int | None = None, changed: tuple = ()) -> Variant | None:
        """The registered mask (None: none) at the diagonal `shift` (None: the case's), with
        the parameters in `changed` ((name, value), ...) replacing the case's."""
        found = self.registered_mask
        return None if found is None else self.mask_variant(found[0], shift, changed)

    def options(self) -> str:
        """The variant in words, for the report."""
        masks = dict(self.masks)

        def said(key: str) -> str:
            values = [list(v) if isinstance(v, tuple) else v for _, v in masks[key]]
            if key in WORDS:
                return WORDS[key].format(*values)
            return f"{key}({', '.join(f'{name}={value}' for name, value in masks[key])})"

        words = [said(key) for key in ("causal", "window") if key in masks]
        if self.softcap is not None:
            words.append(f"softcap={self.softcap:g}")
        if self.alibi:
            words.append("ALiBi")
        if self.sinks:
            words.append("sinks")
        words += [said(key) for key in ("documents", "prefix", "chunked") if key in masks]
        if self.rotary is not None:
            words.append(f"RoPE {self.rotary}")
        words += [said(key) for key in masks if key not in WRITTEN]
        if self.q_size != 1.0 and self.softcap is None:  # (softcap cases: large scores capped)
            words.append(f"large logits (std {self.q_size:g})")
        if self.gqa:
            words.append("GQA")
        if self.shift > 0:
            words.append(f"decode (L < S, shift {self.shift})")
        if self.scale is not None:
            words.append(f"softmax_scale={self.scale:g}")
        if self.q[0] > 1:
            words.append(f"batch {self.q[0]}")
        return ", ".join(words) or "-"


def _case(name: str, shapes: tuple, *masks: tuple, **options: object) -> VariantCase:
    """A case of shapes (H, Hkv, L, S, E[, Ev]): q (1, H, L, E), k (1, Hkv, S, E), v (1, Hkv, S,
    Ev) with the registered masks `masks` (made by `mask`) and the other options."""
    H, Hkv, L, S, E, Ev = (*shapes, shapes[-1])[:6]
    q, k, v = (1, H, L, E), (1, Hkv, S, E), (1, Hkv, S, Ev)
    return VariantCase(name, q, k, v, masks=masks, **options)


def variant_cases(dtype: str, interface: bool = False) -> list[VariantCase]:
    """The standard variant cases: each variant alone, in a decode step, and combined; with
    `interface` (FlashAttention's own, which has a scale keyword and a batch axis) also a
    softmax_scale of the case's own and a batch of 2; float16 adds scores past its exp's
    overflow (11.09: float32 and bfloat16 overflow past 88.7)."""
    c, big, causal = _case, 3.0, mask("causal")  # softcap cases: scores of a few caps (big)
    if dtype == "float16":  # scores of std 8: exp(score) without the row max overflows
        return variant_cases("float32", interface) + [
            c("large-logits-causal", (2, 2, 16, 16, 16), causal, q_size=8.0)
        ]
    return [
        c("window-both-sides", (2, 2, 20, 20, 16, 8), mask("window", 3, 2)),
        c("window-causal", (2, 2, 24, 24, 16), mask("window", 5, 0)),
        c("window-tiles", (1, 1, 70, 70, 32), mask("window", 17, 0)),
        c("window-decode", (2, 2, 4, 40, 16), mask("window", 9, 0)),
        c("softcap", (2, 2, 12, 16, 16), softcap=2.0, q_size=big),
        c("softcap-causal", (2, 2, 16, 16, 16), causal, softcap=2.0, q_size=big),
        c("alibi-causal", (4, 4, 16, 16, 16), causal, alibi=True),
        c("sinks", (2, 2, 12, 16, 16), sinks=True),
        c("documents", (2, 2, 20, 20, 16), mask("documents", (0, 6, 13, 20))),
        c("documents-causal", (2, 2, 20, 20, 16), causal, mask("documents", (0, 7, 11, 20))),
        c("prefix-lm", (2, 2, 16, 16, 16), mask("prefix", 5)),
        c("prefix-tiles", (1, 1, 80, 80, 16), mask("prefix", 67)),  # past a tile of 16 or 64
        c("chunked-causal", (2, 2, 30, 30, 16), causal, mask("chunked", 8)),
        c("decode-causal", (2, 2, 3, 29, 16), causal),
        c("decode-split-kv-gqa", (4, 2, 2, 96, 32), causal),  # packed-GQA decode
        c("rope-half", (2, 2, 12, 12, 16), causal, rotary="half"),
        c("rope-interleaved", (2, 2, 12, 12, 16), causal, rotary="interleaved"),
        c("rope-decode", (2, 2, 2, 20, 16), causal, rotary="half"),
        c(
            "window-softcap-gqa-sinks",
            (4, 2, 24, 24, 16),
            mask("window", 7, 0),
            softcap=2.0,
            sinks=True,
            q_size=big,
        ),  # fmt: skip
        c("alibi-window", (4, 4, 20, 20, 16), mask("window", 6, 0), alibi=True),
        c(
            "documents-window",
            (2, 2, 24, 24, 16),
            mask("documents", (0, 9, 24)),
            mask("window", 4, 0),
        ),
        # outside kernels' slips (issue 35): head counts not a power of two (naive ALiBi slopes
        # are exact for H = 4), a cap and scale whose product is not 1/cap, ALiBi with softcap,
        # a chunked decode step, documents of length 1
        c("alibi-6-heads", (6, 6, 16, 16, 16), causal, alibi=True),
        c(
            "alibi-softcap-12-heads",
            (12, 12, 16, 16, 16),
            causal,
            alibi=True,
            softcap=2.0,
            q_size=big,
        ),  # fmt: skip
        c("softcap-window-e32", (2, 2, 20, 20, 32), mask("window", 8, 0), softcap=3.0, q_size=4.5),
        c("chunked-decode", (2, 2, 3, 29, 16), causal, mask("chunked", 8)),
        c("documents-single", (2, 2, 20, 20, 16), mask("documents", (0, 1, 8, 9, 15, 20))),
        *registered_cases(),
        *(interface_cases() if interface else []),
    ]


def interface_cases() -> list[VariantCase]:
    """FlashAttention's interface's own: softmax_scale not 1/sqrt(E) (a kernel that ignores it
    fails here only), two batch entries with GQA, causal, L < S (two sequences packed), and
    causal with more queries than keys (its first L - S rows see no key: output 0, lse
    infinite, as FlashAttention documents)."""
    shapes = (2, 4, 10, 16), (2, 2, 14, 16), (2, 2, 14, 16)  # decode: 10 queries of 14 keys
    return [
        _case("softmax-scale", (2, 2, 16, 16, 16), scale=0.4),
        VariantCase("batch-decode-gqa", *shapes, masks=(mask("causal"),)),
        _case("causal-more-queries", (2, 2, 20, 12, 16), mask("causal")),
    ]


def registered_cases() -> list[VariantCase]:
    """One case per registered mask not written out above: its parameters at their defaults,
    the queries the last 20 of 24 positions (the alignment shift 4 matters)."""
    return [
        _case(
            key.replace("_", "-"), (2, 2, 20, 24, 16), mask(key, *(p.default for p in cls.params))
        )
        for key, cls in DERIVED.items()
    ]


ROPE_BASE = 10000.0  # the RoPE cases' base: theta_m = ROPE_BASE ** (-2m / rotary_dim)


def rotary_tables(S: int, rotary_dim: int, base: float = ROPE_BASE) -> tuple[list, list]:
    """FlashAttention's rotary_cos, rotary_sin: (S, rotary_dim / 2), position p, pair m."""
    theta = [base ** (-2.0 * m / rotary_dim) for m in range(rotary_dim // 2)]
    cos = [[math.cos(p * t) for t in theta] for p in range(S)]
    sin = [[math.sin(p * t) for t in theta] for p in range(S)]
    return cos, sin


__all__ = [
    "DERIVED",
    "ROPE_BASE",
    "VARIANT_FEATURES",
    "VariantCase",
    "mask",
    "registered_cases",
    "rotary_tables",
    "variant_cases",
]
