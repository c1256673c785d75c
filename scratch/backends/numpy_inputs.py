"""NumPy backend's input conversion: lists, arrays and tensors in, checked NumPy arrays out.

Lists go through the ground truth's own reader (scratch.ops.validate), so every backend accepts and
refuses the same inputs with the same messages; arrays and tensors are checked here.
"""

from __future__ import annotations

import math

import numpy as np

from scratch.backends import numpy_chunked
from scratch.ops import validate
from scratch.ops.validate import check_positive_int

DTYPES = ("float64", "float32")


def _where(name: str, index: tuple, shape: tuple[int, ...]) -> str:
    """`name[i][j]...` for an index tuple, by the ground truth's own renderer."""
    return validate._position(name, int(np.ravel_multi_index(index, shape)), shape)


def _raw_array(obj: object, name: str) -> np.ndarray:
    """A nested list, NumPy array or torch tensor as a NumPy array (no dtype change yet).

    Lists and tuples are read by the ground truth's own reader, so every backend accepts and
    refuses the same lists (Fractions and big ints yes; Decimals, bools among numbers, arrays
    or ranges inside lists no) with the same messages.
    """
    validate.refuse_valueless_arrays(obj, name)
    if hasattr(obj, "detach") and hasattr(obj, "cpu"):  # a torch tensor, without importing torch
        tensor = obj.detach().cpu()
        if tensor.is_floating_point() and str(tensor.dtype) not in (
            "torch.float32",
            "torch.float64",
        ):
            tensor = tensor.float()  # float16 / bfloat16 have no exact NumPy twin here
        return tensor.numpy()
    if isinstance(obj, np.ndarray):
        return obj
    if not isinstance(obj, (list, tuple)):
        raise TypeError(
            f"{name}: expected a matrix (nested lists of numbers or an array), "
            f"found {validate._describe(obj)}"
        )
    if name == "attn_mask":
        values, _, is_bool = validate.as_mask(obj, name)
        return np.asarray(values, dtype=bool if is_bool else np.float64)
    data, _ = validate.as_tensor(obj, name, min_dims=1)
    return np.asarray(data, dtype=np.float64)


def _check_regular(arr: np.ndarray, name: str) -> None:
    """Refuse object/string arrays, empty axes and scalars."""
    if arr.ndim == 0:
        raise TypeError(
            f"{name}: expected a matrix, found a scalar {validate._describe(arr.item())}"
        )
    if arr.dtype.kind == "O":
        raise ValueError(
            f"{name}: ragged or mixed nesting (object array of shape {arr.shape}); "
            f"expected a regular matrix of numbers"
        )
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected numbers, found dtype {arr.dtype}")
    if 0 in arr.shape:
        raise ValueError(
            f"{name}: empty dimension in shape {arr.shape}; expected at least one entry "
            f"along every axis"
        )


def _all_finite_quick(arr: np.ndarray) -> bool:
    """True when every element is finite, by one or two passes and no temporary; False may be
    a false alarm (the sum of squares can overflow): the caller then checks element by element."""
    if arr.dtype in (np.float32, np.float64) and arr.flags.c_contiguous:
        flat = np.asarray(arr).reshape(-1)  # np.matrix would stay 2-D
        with np.errstate(over="ignore", invalid="ignore"):
            return bool(np.isfinite(np.dot(flat, flat)))  # NaN or inf if any element is
    return bool(np.isfinite(arr.min()) and np.isfinite(arr.max()))  # NaN/inf is the min or max


def _check_finite(arr: np.ndarray, name: str, allow_neg_inf: bool = False) -> None:
    """Refuse NaN and +-inf (a float mask may hold -inf) naming the first bad position."""
    if arr.dtype.kind in "biu" or arr.size == 0:
        return  # integers and bools are finite, and an empty array has nothing to check
    if _all_finite_quick(arr):
        return
    bad = ~np.isfinite(arr)
    if allow_neg_inf:
        bad &= ~np.isneginf(arr)
    if bad.any():
        index = tuple(np.argwhere(bad)[0])
        expected = "finite numbers or -inf" if allow_neg_inf else "finite numbers"
        raise ValueError(
            f"{name}: expected {expected}, found {arr[index]} at {_where(name, index, arr.shape)}"
        )


def as_numbers(obj: object, name: str, dtype: np.dtype) -> np.ndarray:
    """Validate a data input and return it as a finite float array of `dtype`."""
    arr = _raw_array(obj, name)
    _check_regular(arr, name)
    if arr.dtype.kind == "b":
        raise TypeError(f"{name}: expected numbers, found bools (dtype {arr.dtype})")
    _check_finite(arr, name)
    if arr.dtype == dtype:
        return arr
    with np.errstate(over="ignore"):
        cast = np.asarray(arr, dtype=dtype)
    if cast.dtype.itemsize < arr.dtype.itemsize and not np.isfinite(cast).all():
        # finite before the cast: too large for `dtype`
        index = tuple(np.argwhere(~np.isfinite(cast))[0])
        raise ValueError(
            f"{name}: {arr[index]} at {_where(name, index, arr.shape)} is too large for {dtype} "
            f"(largest {np.finfo(dtype).max:.4g}); pass dtype='float64'"
        )
    return cast


_FLOAT32_NAMES = ("float32", "float16", "torch.float32", "torch.float16", "torch.bfloat16")


def result_dtype(dtype: object, *inputs: object) -> np.dtype:
    """`dtype=` when given, else float32 when every array input is float32, else float64."""
    if dtype is not None:
        text = str(dtype)
        try:  # a torch dtype by its name; anything else as NumPy reads it
            chosen = np.dtype(text[6:] if text.startswith("torch.") else dtype)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"dtype: expected one of {DTYPES}, found {validate._describe(dtype)}"
            ) from exc
        if chosen.name not in DTYPES:
            raise ValueError(f"dtype: expected one of {DTYPES}, found {chosen.name!r}")
        return chosen
    given = [obj for obj in inputs if obj is not None]
    if given and all(str(getattr(obj, "dtype", "")) in _FLOAT32_NAMES for obj in given):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def as_mask(obj: object, dtype: np.dtype) -> np.ndarray:
    """Validate a mask: bools (True = may attend) stay bool; floats (added) become `dtype`."""
    name = "attn_mask"
    arr = _raw_array(obj, name)
    _check_regular(arr, name)
    if arr.dtype.kind in "iu":
        raise TypeError(
            f"{name}: found only integers (dtype {arr.dtype}), which are ambiguous; expected "
            f"bools (True = may attend) or floats (added to the scaled scores, -inf = masked)"
        )
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind == "f" and arr.dtype.itemsize > dtype.itemsize:
        # finite values past the narrower dtype's range stay finite: "very unlikely" (-1e300)
        # must not turn into "masked" (-inf) by overflowing in the cast
        top = np.finfo(dtype).max
        arr = np.where(np.isfinite(arr), np.clip(arr, -top, top), arr)
    arr = np.asarray(arr, dtype=dtype)
    _check_finite(arr, name, allow_neg_inf=True)
    return arr


class Draws:
    """Uniform [0, 1) draws for dropout, row-major, from a Generator or a random.Random."""

    def __init__(self, rng: object):
        if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
            rng = np.random.default_rng(int(rng))
        elif rng is None:
            rng = np.random.default_rng()  # fresh entropy: unseeded, like the ground truth's
        elif not isinstance(rng, np.random.Generator) and not callable(
            getattr(rng, "random", None)
        ):
            raise TypeError(
                f"rng: expected a numpy.random.Generator, an int seed, a random.Random"
                f" or None, found {validate._describe(rng)}"
            )
        self.rng = rng

    def __call__(self, shape: tuple[int, ...]) -> np.ndarray:
        """An array of draws; a random.Random gives the same stream as the ground truth."""
        if isinstance(self.rng, np.random.Generator):
            return self.rng.random(shape)
        draw = self.rng.random
        return np.fromiter(
            (draw() for _ in range(math.prod(shape))), np.float64, math.prod(shape)
        ).reshape(shape)


def block_sizes(block_size: object) -> tuple[int, int]:
    """(query chunk, key block) from None, one int (both) or a pair."""
    if block_size is None:
        return numpy_chunked.QUERY_CHUNK, numpy_chunked.KEY_BLOCK
    pair = (block_size, block_size) if not isinstance(block_size, (tuple, list)) else block_size
    if len(pair) != 2:
        raise ValueError(f"block_size: expected an int or (query_chunk, key_block), found {pair}")
    for p in pair:
        check_positive_int(p, "block_size")
    return int(pair[0]), int(pair[1])


__all__ = ["DTYPES", "Draws", "as_mask", "as_numbers", "block_sizes", "result_dtype"]


# ---------------------------------------------------------------- the backward's and flex's inputs

BACKWARD_DTYPES = ("float32", "float64")  # numpy_backward's and numpy_flex's dtypes


def _array(x: object, name: str, dtype: np.dtype, finite: bool = True) -> np.ndarray:
    """x as a finite float array of `dtype` with at least 2 axes; errors name the argument
    (finite=False: the caller checks for inf and NaN itself)."""
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x)
    except ValueError as exc:
        raise ValueError(f"{name}: expected a regular (rectangular) array of numbers") from exc
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
        raise TypeError(f"{name}: expected real numbers, found an array of dtype {arr.dtype}")
    if arr.ndim < 2 or 0 in arr.shape:
        raise ValueError(
            f"{name}: expected a non-empty (..., length, width) array, found shape {arr.shape}"
        )
    arr = arr.astype(dtype, copy=False)
    if finite and not np.all(np.isfinite(arr)):
        raise not_finite(name)
    return arr


def not_finite(name: str) -> ValueError:
    """The error for an argument holding inf or NaN."""
    return ValueError(f"{name}: expected finite numbers, found inf or NaN")


def _dtype(dtype: object, *inputs: object) -> np.dtype:
    """float32 when asked or when every input is a float32 array, else float64."""
    return np.dtype(validate.dtype_of(dtype, inputs, BACKWARD_DTYPES))


def forward_output(output: object, lse: object, shape: tuple, dtype: np.dtype, source: str):
    """A backward's given forward: (output (shape), lse (shape[:-1])) as `dtype` arrays, or None
    when neither is given; ValueError when only one is or a shape is not the output's."""
    if (output is None) != (lse is None):
        raise ValueError(f"output, lse: pass both (from {source}) or neither")
    if output is None:
        return None
    output, lse = np.asarray(output, dtype), np.asarray(lse, dtype)
    if output.shape != shape or lse.shape != shape[:-1]:
        raise ValueError(
            f"output, lse: expected shapes {shape} (..., L, Ev) and {shape[:-1]} (..., L), "
            f"found {output.shape} and {lse.shape}"
        )
    return output, lse


class GroupedHeads:
    """What a problem whose query heads share kv heads in groups of `group` (GQA) does with
    (..., heads, n, c) arrays: numpy_backward's and numpy_flex's."""

    group: int

    def repeat_kv(self, x: np.ndarray) -> np.ndarray:
        """(..., Hkv, n, c) -> (..., H, n, c): query head h reads kv head h // group."""
        return np.repeat(x, self.group, axis=-3) if self.group > 1 else x

    def sum_groups(self, x: np.ndarray) -> np.ndarray:
        """(..., H, n, c) -> (..., Hkv, n, c): a kv head's gradient sums its group's query heads."""
        if self.group == 1:
            return x
        return x.reshape(x.shape[:-3] + (-1, self.group) + x.shape[-2:]).sum(axis=-3)
