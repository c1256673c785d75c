"""Torch backend, floor 0: inputs as tensors (lists, NumPy arrays, tensors), dtype and device rules.

The result dtype is `dtype=` when given, else the common floating dtype of the data inputs
(nested lists and integer arrays count as float64); float16/bfloat16 data are computed in float32.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from scratch.ops import validate

DTYPES = ("float64", "float32", "float16", "bfloat16")
_LOW_PRECISION = (torch.float16, torch.bfloat16)
_FLOATS = {name: getattr(torch, name) for name in DTYPES}
_FLOAT_SET = frozenset(_FLOATS.values())


def check_dtype(dtype: object) -> torch.dtype | None:
    """`dtype=` as a torch dtype: a name from DTYPES, a torch dtype, or None (from the inputs)."""
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype) and dtype in _FLOATS.values():
        return dtype
    if isinstance(dtype, str) and dtype in _FLOATS:
        return _FLOATS[dtype]
    raise ValueError(f"dtype: expected None or one of {', '.join(DTYPES)}, found {dtype!r}")


def _is_numpy(obj: object) -> bool:
    """True for a NumPy array, without importing NumPy."""
    return type(obj).__module__ == "numpy" and hasattr(obj, "dtype") and hasattr(obj, "shape")


def _from_numpy(arr: object, name: str) -> torch.Tensor:
    """A NumPy array as a CPU tensor: native byte order, long double as float64, never read-only."""
    if not arr.dtype.isnative:  # torch refuses big-endian arrays
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:  # long double: torch has no twin
        arr = arr.astype("float64")
    if not (arr.flags.c_contiguous and arr.flags.writeable):  # negative strides; read-only warns
        arr = arr.copy()
    try:
        return torch.from_numpy(arr)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(
            f"{name}: cannot convert a NumPy array of dtype {arr.dtype} ({exc})"
        ) from exc


def as_tensor(
    obj: object,
    name: str,
    device: torch.device,
    dtype: torch.dtype | None = None,
    min_dims: int = 1,
) -> torch.Tensor:
    """A numeric input as a tensor on `device` in `dtype` (None: floats keep theirs, else f64)."""
    validate.refuse_valueless_arrays(obj, name)  # meta tensors, NumPy masked arrays
    if _is_numpy(obj):
        if obj.dtype.kind not in "iuf":
            raise TypeError(f"{name}: expected a real numeric array, found dtype {obj.dtype}")
        obj = _from_numpy(obj, name)
    if isinstance(obj, torch.Tensor):
        if obj.dtype not in _FLOAT_SET and (obj.is_complex() or obj.dtype == torch.bool):
            raise TypeError(f"{name}: expected a real numeric tensor, found dtype {obj.dtype}")
        if obj.ndim == 0 or 0 in obj.shape:
            raise ValueError(f"{name}: expected a non-empty matrix, found shape {tuple(obj.shape)}")
        if obj.ndim < min_dims:  # too few dims: the truth's message (it raises on this shape)
            validate.as_tensor(obj.tolist(), name, min_dims=min_dims)
        if dtype is None:
            dtype = obj.dtype if obj.dtype in _FLOAT_SET else torch.float64
        if obj.dtype != dtype or obj.device != device:  # no copy when nothing changes
            obj = _narrow(obj, name, device, dtype)
        return obj
    data, _ = validate.as_tensor(
        obj, name, min_dims=min_dims
    )  # same checks and messages as the truth
    wide = torch.tensor(data, dtype=torch.float64, device=device)
    return wide if dtype in (None, torch.float64) else _narrow(wide, name, device, dtype)


def _narrow(t: torch.Tensor, name: str, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """t on `device` in `dtype`; a finite value too large for `dtype` is a ValueError, not inf."""
    out = t.to(device=device, dtype=dtype)
    source_max = torch.finfo(t.dtype).max if t.is_floating_point() else math.inf
    if torch.finfo(dtype).max >= source_max or out.device.type == "meta":
        return out  # widening (or equal): nothing can overflow
    grew = out.isinf() & torch.isfinite(t).to(out.device)
    if bool(grew.any()):
        index = tuple(int(i) for i in grew.nonzero()[0])
        position = name + "".join(f"[{i}]" for i in index)
        raise ValueError(
            f"{name}: {t[index].item():.6g} at {position} is too large for "
            f"{str(dtype).removeprefix('torch.')} (largest {torch.finfo(dtype).max:.4g}); "
            f"pass dtype='float64'"
        )
    return out


def as_mask(obj: object, device: torch.device) -> torch.Tensor:
    """attn_mask as a bool (True = may attend) or floating (added) tensor on `device`."""
    validate.refuse_valueless_arrays(obj, "attn_mask")
    if _is_numpy(obj) and obj.dtype.kind in "biuf":
        obj = _from_numpy(obj, "attn_mask")
    if isinstance(obj, torch.Tensor):
        if obj.dtype != torch.bool and not obj.is_floating_point():
            raise TypeError(
                f"attn_mask: found dtype {obj.dtype}, which is ambiguous; expected bools "
                f"(True = may attend) or floats (added to the scaled scores, -inf = masked)"
            )
        if obj.ndim == 0 or 0 in obj.shape:
            raise ValueError(
                f"attn_mask: expected a non-empty mask, found shape {tuple(obj.shape)}"
            )
        return obj if obj.device == device else obj.to(device)
    values, _, is_bool = validate.as_mask(obj, "attn_mask")
    return torch.tensor(values, dtype=torch.bool if is_bool else torch.float64, device=device)


def common_dtype(raw: tuple, dtype: torch.dtype | None) -> torch.dtype:
    """`dtype` if given, else the promoted floating dtype of the data inputs (lists: float64)."""
    # the rule shared with the NumPy backend: float64 when any input is float64 or a list,
    # float32 when float32 meets a 16-bit dtype (or float16 meets bfloat16), a 16-bit dtype only
    # when every input has it; integer arrays count as float64, like lists (exact values)
    if dtype is not None:
        return dtype
    found = None
    for obj in raw:
        if obj is None:
            continue
        if isinstance(obj, torch.Tensor):
            kind = obj.dtype
        elif _is_numpy(obj):
            kind = _np_dtype(obj)
        else:  # nested lists (and other array-likes) are read as float64, like the truth's
            kind = torch.float64
        if kind not in _FLOAT_SET:
            kind = torch.float64
        found = kind if found is None or found == kind else torch.promote_types(found, kind)
    return torch.float64 if found is None else found


def _np_dtype(arr: object) -> torch.dtype:
    """The torch dtype matching a NumPy array's float dtype (integers: int64, not a float)."""
    kind, size = arr.dtype.kind, arr.dtype.itemsize
    if kind == "f":
        return {2: torch.float16, 4: torch.float32}.get(size, torch.float64)
    return torch.int64


def compute_dtype(storage: torch.dtype) -> torch.dtype:
    """Math dtype: float32 for float16/bfloat16 (as fused kernels accumulate), else itself."""
    return torch.float32 if storage in _LOW_PRECISION else storage


def generator(rng: object, device: torch.device) -> torch.Generator | None:
    """rng as a torch.Generator: None (global RNG), an int seed, or a Generator."""
    if rng is None or isinstance(rng, torch.Generator):
        return rng
    if isinstance(rng, bool) or not isinstance(rng, int):
        raise TypeError(f"rng: expected None, an int seed or a torch.Generator, found {rng!r}")
    gen = torch.Generator(device=device)
    gen.manual_seed(rng)
    return gen


def cast_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A float mask in `dtype`, finite entries clamped to its range (-inf stays -inf)."""
    if mask.dtype == dtype:
        return mask
    top = torch.finfo(dtype).max
    if torch.finfo(mask.dtype).max > top:  # a narrower range: clamp what would overflow, or
        # -1e300 cast to float32 would become -inf, turning "very unlikely" into "masked"
        wide = mask.to(torch.promote_types(mask.dtype, dtype))  # where `top` is exact
        mask = torch.where(wide.isfinite(), wide.clamp(-top, top), wide)
    return mask.to(dtype)


def as_device(device: object) -> torch.device:
    """A torch.device with its index filled in for CUDA (so tensors already there match it)."""
    if isinstance(device, torch.device) and (device.type == "cpu" or device.index is not None):
        return device
    if not isinstance(device, (str, numbers.Integral, torch.device)) or isinstance(device, bool):
        raise TypeError(f"device: expected a torch device or its name, found {device!r}")
    if isinstance(device, numbers.Integral):  # a CUDA index, NumPy's integers too
        device = int(device)
    try:
        device = torch.device(device)
    except RuntimeError as exc:  # torch: "Expected one of cpu, cuda, ... device type"
        raise ValueError(f"device: {device!r} is not a torch device ({exc})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {str(device)!r}, but this torch sees no CUDA device")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


@dataclass(frozen=True)
class Placement:
    """Where and in what dtype one call computes: the torch-only settings."""

    device: torch.device
    storage: torch.dtype  # the inputs' and results' dtype

    @property
    def wide(self) -> torch.dtype:
        """The math dtype: float32 for float16/bfloat16 data, else the storage dtype."""
        return compute_dtype(self.storage)

    def tensor(self, obj: object, name: str, min_dims: int = 1) -> torch.Tensor:
        """A numeric input as a tensor here, in the storage dtype."""
        return as_tensor(obj, name, self.device, self.storage, min_dims)


def placement(raw: tuple, dtype: object, device: object) -> Placement:
    """Check `dtype=` and `device=` and pick the storage dtype of the data inputs `raw`."""
    return Placement(as_device(device), common_dtype(raw, check_dtype(dtype)))


__all__ = [
    "DTYPES",
    "Placement",
    "as_device",
    "as_mask",
    "as_tensor",
    "cast_mask",
    "check_dtype",
    "common_dtype",
    "compute_dtype",
    "generator",
    "placement",
]
