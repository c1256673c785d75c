"""Example: the inputs of one worked example (everything but the options), checked once.

A trace is asked for with two values: an `Example` (what is computed on: x, key, value, the
projections, the labels, the head counts) and an `Options` (how: mask, scale, empty-row
policy, dropout). Every backend's `trace_example(example, options)` reads these two and nothing
else; the keyword front doors (`trace_attention`) only build them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from scratch.core.options import Options
from scratch.ops.plan import PARAMS
from scratch.ops.validate import _describe, check_hook, check_value_has_key


@dataclass(frozen=True, eq=False)
class Example:
    """The inputs of one worked example: x (q itself when no w_q), key, value, projections.

    Compared by identity (its fields may be arrays).

    Attributes:
        x: the query input (L, d_model).
        key: the key input (S, d_kv_in) for cross-attention; None: self-attention.
        value: the value input (S, d_kv_in) when it differs from key; None: value = key
            (value=key is stored as None).
        params: PARAMS names (w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o) -> matrices and biases
            (w_q (d_model, H * E), ...); a name left out (or None) is not given.
        tokens: L labels; None: t0, t1, ...
        key_tokens: S labels; None: the query's (self-attention) or k0, k1, ...
        num_heads: H.
        num_kv_heads: Hkv; None: H; fewer: grouped-query attention.
    """

    x: object  # (L, d_model): the query input
    key: object = None  # (S, d_key) for cross-attention
    value: object = None  # (S, d_value) when it differs from key
    params: Mapping[str, object] = field(default_factory=dict)
    tokens: object = None  # L labels; None: t0, t1, ...
    key_tokens: object = None  # S labels; None: the query's (self-attention) or k0, k1, ...
    num_heads: int = 1
    num_kv_heads: int | None = None  # None: num_heads; fewer: grouped-query attention

    def __post_init__(self) -> None:
        """Check the parameter names and the key/value pairing; keep only the given params."""
        if not isinstance(self.params, Mapping):
            raise TypeError(
                f"params: expected a mapping of {', '.join(PARAMS)} to matrices, "
                f"found {_describe(self.params)}"
            )
        unknown = [name for name in self.params if name not in PARAMS]
        if unknown:
            raise ValueError(
                f"params: unknown name {unknown[0]!r}; expected some of {', '.join(PARAMS)}"
            )
        given = {name: self.params[name] for name in PARAMS if self.params.get(name) is not None}
        object.__setattr__(self, "params", MappingProxyType(given))
        check_value_has_key(self.key, self.value)
        if self.value is self.key:  # value=key: one input, as with value=None
            object.__setattr__(self, "value", None)

    def projections(self) -> dict[str, object]:
        """Every PARAMS name, in order, to its matrix or bias (None where not given)."""
        return {name: self.params.get(name) for name in PARAMS}


def check_trace_call(
    example: object, options: object, on_projected: object, no_dropout: str = ""
) -> None:
    """What every backend's trace_example checks first: the two types, the hook, no lse, and
    (where `no_dropout` names a backend's trace: no dropout) dropout_p = 0."""
    if not isinstance(example, Example):
        raise TypeError(f"example: expected a scratch.Example, found {_describe(example)}")
    if not isinstance(options, Options):
        raise TypeError(
            f"options: expected a scratch.core.options.Options, found {_describe(options)}"
        )
    if options.return_lse:
        raise ValueError("return_lse: a trace has no lse step; expected return_lse=False")
    check_hook(on_projected, "on_projected")
    if no_dropout and options.dropout_p:
        raise ValueError(f"dropout_p: {no_dropout} has no dropout; expected 0.0")


__all__ = ["Example", "check_trace_call"]
