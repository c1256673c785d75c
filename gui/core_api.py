"""The window's only door into scratch: presets, backends, explain and compare_traces.

Each function asks scratch for the piece named in the contract. Where a piece has not landed
yet, the adapter says so in plain words (ADAPTERS lists which are in use) instead of faking it.
"""

from __future__ import annotations

from dataclasses import dataclass

import scratch

ADAPTERS: set[str] = set()  # names of contract pieces this module had to stand in for


@dataclass(frozen=True)
class Explanation:
    """Stand-in for scratch.explain's result while it is missing."""

    text: str
    sources: tuple = ()


def preset_names() -> list[str]:
    """Every preset of scratch.presets (empty while the module is missing)."""
    try:
        from scratch import presets
    except ImportError:
        ADAPTERS.add("presets")
        return []
    return list(presets.names())


def get_preset(name: str) -> object:
    """scratch.presets.get(name); KeyError for an unknown name."""
    if name not in preset_names():
        raise KeyError(f"unknown preset {name!r}; presets: {', '.join(preset_names())}")
    from scratch import presets

    return presets.get(name)


def backend_dtypes() -> dict[str, tuple[str, ...]]:
    """{backend name: dtype names} for every entry of scratch.backends.available()."""
    from scratch import backends

    if not hasattr(backends, "available"):
        ADAPTERS.add("backends")
        return {"scratch": ("float64",)}
    return {name: tuple(backends.get(name).dtypes) for name in backends.available()}


def trace_with_backend(name: str, dtype: str, **kwargs) -> object:
    """backend(name).trace_attention(**kwargs, dtype=dtype); the ground truth for 'scratch'."""
    if name == "scratch":
        return scratch.trace_attention(**kwargs)
    from scratch import backends

    return backends.get(name).trace_attention(**kwargs, dtype=dtype)


def ground_truth(**kwargs) -> object:
    """scratch.trace_attention, the exact reference every backend is checked against."""
    return scratch.trace_attention(**kwargs)


def causal_mask(L: int, S: int, align: str) -> list[list[bool]]:
    """scratch.causal_mask."""
    return scratch.causal_mask(L, S, align)


def explain(trace: object, step: str, index: tuple[int, ...]) -> object:
    """scratch.explain(trace, step, index) -> object with .text and .sources."""
    fn = getattr(scratch, "explain", None)
    if fn is None:
        ADAPTERS.add("explain")
        return Explanation(f"{step}{''.join(f'[{i}]' for i in index)} (scratch.explain missing)")
    return fn(trace, step, tuple(index))


def compare(trace: object, reference: object) -> list | None:
    """scratch.compare_traces(trace, reference), or None while it is missing."""
    fn = getattr(scratch, "compare_traces", None)
    if fn is None:  # adapter: the module exists before scratch/__init__ exports it
        ADAPTERS.add("compare_traces")
        try:
            from scratch.compare import compare_traces as fn
        except ImportError:
            return None
    return fn(trace, reference)
