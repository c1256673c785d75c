"""One torch flex_attention call's inputs, checked: tensors, sizes, scale, torch mods, sinks.

The checks and their wording are the ground truth's (scratch.flex.check_call). block_mask is a
scratch BlockMask (from scratch.create_block_mask; its mask_mod's torch form builds torch's own
block mask) or a torch BlockMask (from torch's create_block_mask, used as it is).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch.nn.attention.flex_attention import BlockMask as TorchBlockMask
from torch.nn.attention.flex_attention import create_block_mask

from scratch.flex import check_block_shape, check_call
from scratch.options import FlexOptions
from scratch.validate import check_scale
from scratch.variants.sinks import sink_logits

from .torch_flex_mods import torch_form
from .torch_inputs import Placement, placement

_QKV = ("query", "key", "value")


@dataclass(frozen=True)
class FlexCall:
    """A checked call: q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev) and what changes them."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    place: Placement
    scale: float
    score_mod: Callable | None  # torch forms (torch_flex_mods.torch_form)
    mask_mod: Callable | None
    mask_shape: tuple[int, int] | None  # the block mask's (B, H): 1 broadcasts
    block_size: tuple[int, int] | int
    given_block: TorchBlockMask | None  # a torch BlockMask passed in
    sinks: torch.Tensor | None  # (H,) in the math dtype

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(B, H, L, S)."""
        return (*self.q.shape[:3], self.k.shape[2])

    def torch_block_mask(self) -> TorchBlockMask | None:
        """torch's block mask of the mask_mod's torch form (the tiles FlexAttention visits)."""
        if self.given_block is not None or self.mask_mod is None:
            return self.given_block
        (_, _, L, S), (mb, mh) = self.shape, self.mask_shape
        return create_block_mask(
            self.mask_mod, mb, mh, L, S, device=self.place.device, BLOCK_SIZE=self.block_size
        )


def _sinks(sinks: object, H: int, place: Placement) -> torch.Tensor | None:
    """The sink logits as a (H,) tensor in the math dtype (a tensor passed in keeps its graph)."""
    if sinks is None:
        return None
    if isinstance(sinks, torch.Tensor):
        sink_logits(sinks.detach().tolist() if sinks.ndim == 1 else sinks, H)
        return sinks.to(device=place.device, dtype=place.wide)
    logits = sink_logits(sinks, H)
    return torch.tensor(logits, device=place.device, dtype=place.wide)


def prepare(
    query: object, key: object, value: object, options: FlexOptions, device, dtype
) -> FlexCall:
    """Check one call's inputs (the ground truth's rules) and give its tensors and torch mods."""
    place = placement((query, key, value), dtype, device)
    q, k, v = (place.tensor(x, name, min_dims=0) for x, name in zip((query, key, value), _QKV))
    block_mask = options.block_mask
    given = block_mask if isinstance(block_mask, TorchBlockMask) else None
    shapes = (tuple(t.shape) for t in (q, k, v))
    checked = replace(options, block_mask=None) if given else options  # torch's: checked below
    B, H, _, L, S, E, _ = check_call(*shapes, checked)
    if given is not None:
        check_block_shape(tuple(given.shape), B, H, L, S)
        mask_mod, mask_shape, size = given.mask_mod, None, 128
    elif block_mask is not None:
        mask_mod, mask_shape = torch_form(block_mask.mask_mod, "mask"), block_mask.shape[:2]
        size = block_mask.block_size
    else:
        mask_mod, mask_shape, size = None, None, 128
    return FlexCall(
        q,
        k,
        v,
        place,
        check_scale(options.scale, E),
        torch_form(options.score_mod, "score"),
        mask_mod,
        mask_shape,
        size,
        given,
        _sinks(options.sinks, H, place),
    )


__all__ = ["FlexCall", "prepare"]
