"""The registry of picker masks: every module of this folder imported once, so each class that
declares a `key` (base.Variant.__init_subclass__) is in MASK_VARIANTS, a new file included."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path

from scratch.variants.base import MASK_VARIANTS, Variant
from scratch.variants.params import Param


@functools.cache
def _import_every_module() -> None:
    """Import each module of this folder once (its classes register as they are defined)."""
    for found in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{__package__}.{found.name}")


def mask_variants() -> dict[str, type[Variant]]:
    """{key: class} of every picker mask, in the order of their modules' names."""
    _import_every_module()
    ordered = sorted(MASK_VARIANTS.items(), key=lambda item: item[1].__module__)
    return dict(ordered)


def mask_params() -> dict[str, Param]:
    """{key: Param} of every mask's parameters, each key once (masks may share one: `left`)."""
    found: dict[str, Param] = {}
    for cls in mask_variants().values():
        for p in cls.params:
            if found.setdefault(p.key, p).default != p.default:
                raise ValueError(f"{p.key}: two masks give the shared field two defaults")
    return found


__all__ = ["mask_params", "mask_variants"]
