"""The caller's arrays (numpy, torch or lists): made from lists, copied, read back as floats."""

from __future__ import annotations

import copy
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from scratch.checker.cases import Case
from scratch.ops.nested import map_leaves

ARRAYS = ("numpy", "torch", "list")


def round_float(x: float, dtype: str) -> float:
    """A Python float rounded to `dtype` (round to nearest even), for array='list'."""
    if dtype == "float64" or not math.isfinite(x):
        return x
    if dtype == "float32":
        return struct.unpack("f", struct.pack("f", x))[0]
    if dtype == "float16":
        return struct.unpack("e", struct.pack("e", x))[0]
    bits = struct.unpack("I", struct.pack("f", x))[0]  # bfloat16: keep the top 16 float32 bits
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("f", struct.pack("I", bits))[0]


def first(nested: object) -> object:
    """The first leaf of nested lists."""
    while isinstance(nested, (list, tuple)):
        nested = nested[0]
    return nested


def shape(nested: object) -> tuple[int, ...]:
    """Shape of nested lists (a scalar has shape ())."""
    dims = []
    while isinstance(nested, list):
        dims.append(len(nested))
        nested = nested[0] if nested else None
    return tuple(dims)


class Arrays:
    """Makes the caller's arrays (numpy, torch or lists) and reads results back as floats."""

    def __init__(self, array: str, device: object):
        self.array, self.device = array, device
        if array == "numpy":
            import numpy

            self.np = numpy
        elif array == "torch":
            import torch

            self.torch = torch

    def check_device(self) -> None:
        """ValueError unless torch can compute (not merely allocate) on the device."""
        if self.array != "torch":
            return
        try:
            probe = self.torch.ones(2, device=self.device)
            float((probe + probe).sum().to("cpu"))  # a meta tensor has no values to read
        except Exception as exc:
            raise ValueError(
                f"device: the checker needs a device that computes values; torch cannot use "
                f"{self.device!r} ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
            ) from exc

    def make(self, data: list, dtype: str) -> object:
        """Data (nested lists of floats or bools) as the caller's array type in `dtype`."""
        is_bool = isinstance(first(data), bool)
        if self.array == "list":
            return data if is_bool else map_leaves(lambda x: round_float(x, dtype), data)
        if self.array == "numpy":
            if dtype == "bfloat16":
                raise ValueError("dtype: numpy has no bfloat16; use array='torch' for bfloat16")
            return self.np.asarray(data, dtype=bool if is_bool else dtype)
        kind = self.torch.bool if is_bool else getattr(self.torch, dtype)
        return self.torch.tensor(data, dtype=kind, device=self.device)

    def copy(self, x: object) -> object:
        """A fresh copy, so that no call sees what an earlier call did to its inputs."""
        if self.array == "list":
            return copy.deepcopy(x)
        return x.clone() if self.array == "torch" else x.copy()

    def same(self, a: object, b: object) -> bool:
        """Whether two arrays hold the same values (the mutation check)."""
        if self.array == "list":
            return a == b
        if self.array == "torch":
            return a.shape == b.shape and bool(self.torch.equal(a, b))
        return a.shape == b.shape and bool(self.np.array_equal(a, b))

    def floats(self, x: object) -> list:
        """An array's values as nested lists of Python floats."""
        if hasattr(x, "detach"):  # a float64 tensor's tolist() gives Python floats already
            return x.detach().to("cpu").double().tolist()
        if getattr(getattr(x, "dtype", None), "kind", None) in ("f", "b", "i", "u"):
            return x.astype("float64").tolist()  # numpy reals: the same floats, made in C
        return map_leaves(float, x.tolist() if hasattr(x, "tolist") else x)

    def take_rows(self, x: object, rows: list[int]) -> object:
        """x[..., rows, :] for a result (array, tensor or nested lists); as is when it cannot."""
        try:
            if hasattr(x, "detach"):
                index = self.torch.tensor(rows, device=x.device)
                return x.index_select(x.dim() - 2, index)
            if hasattr(x, "shape") and hasattr(x, "take"):
                return x.take(rows, axis=x.ndim - 2)
        except Exception:
            return x
        if isinstance(x, list) and len(shape(x)) >= 2:
            lead = shape(x)[:-2]
            return rows_of(x, rows, len(lead))
        return x


def rows_of(x: list, rows: list[int], depth: int) -> list:
    """x[..., rows, :] of nested lists with `depth` leading dims."""
    if depth == 0:
        return [x[i] for i in rows]
    return [rows_of(a, rows, depth - 1) for a in x]


@dataclass
class Inputs:
    """A prepared case's inputs in the caller's arrays: made once, fresh copies for each call."""

    case: Case
    dtype: str
    raw: tuple  # the positional inputs as drawn (float64 lists): q, k, v (and grad_output)
    extra: dict  # keyword -> values as drawn (None: unused): attn_mask (and dropout_mask)
    kwargs: dict  # is_causal, scale, enable_gqa (and dropout_p)
    _masters: dict = field(default_factory=dict, kw_only=True)  # (array, device) -> masters
    _memo: dict = field(default_factory=dict, kw_only=True)

    NAMES: ClassVar[tuple[str, ...]] = ("query", "key", "value", "grad_output")

    def memo(self, key: str, make: Callable) -> object:
        """make() computed once per case (reference errors, bounds, mistake variants)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def masters(self, arrays: Arrays) -> tuple:
        """The positional inputs, then each extra (or None), in the caller's array type."""
        key = (arrays.array, str(arrays.device))
        if key not in self._masters:
            made = tuple(arrays.make(x, self.dtype) for x in self.raw)
            extra = tuple(
                None if x is None else arrays.make(x, self.dtype) for x in self.extra.values()
            )
            self._masters = {key: made + extra}  # one array type at a time
        return self._masters[key]

    def call_args(self, arrays: Arrays) -> tuple[tuple, dict]:
        """Fresh copies of the inputs and the keywords the case needs, as fn gets them."""
        made, n = self.masters(arrays), len(self.raw)
        args = tuple(arrays.copy(x) for x in made[:n])
        kwargs = dict(self.kwargs)
        for word, master in zip(self.extra, made[n:]):
            if master is not None:
                kwargs[word] = arrays.copy(master)
        return args, kwargs

    def mutated(self, arrays: Arrays, args: tuple, kwargs: dict) -> list[str]:
        """The inputs fn changed in place (compared with the masters they were copied from)."""
        made, n = self.masters(arrays), len(self.raw)
        names = [
            name
            for name, got, master in zip(self.NAMES, args, made[:n])
            if not arrays.same(got, master)
        ]
        for word, master in zip(self.extra, made[n:]):
            if master is not None and not arrays.same(kwargs[word], master):
                names.append(word)
        return names


def made_in(arrays: Arrays, dtype: str, tensors: tuple, mask: object, case: Case) -> tuple:
    """The tensors (and mask) made in the caller's array type and read back as the kernel sees
    them: (masters, floats read back, mask master, mask as the ground truth should take it)."""
    masters = tuple(arrays.make(x, dtype) for x in tensors)
    floats = tuple(arrays.floats(x) for x in masters)
    mask_master = None
    if mask is not None:
        mask_master = arrays.make(mask, dtype)
        if case.mask == "float":
            mask = arrays.floats(mask_master)
    return masters, floats, mask_master, mask
