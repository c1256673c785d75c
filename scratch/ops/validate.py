"""Turn user input into nested lists of floats, and reject bad input with a clear message.

Every error names the argument (`query`, `key`, `attn_mask`, `w_q`, `scale`, ...), the position
and what was expected versus what was found. Nesting is walked level by level, never
recursively, so absurdly deep input gives a ValueError instead of a RecursionError.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Sequence

from scratch.ops.nested import reshape

MASKED_ROWS = ("zero", "nan", "uniform")
"""The policies for a row whose every key is masked (`masked_rows=`): zero weights and output
(PyTorch >= 2.5, FlashAttention), NaN (the textbook 0/0), or uniform weights 1/S."""
MAX_DIMS = 32  # deeper than any real attention tensor; guards against runaway nesting

Nested = list  # nested lists of floats (or bools for masks)


def _describe(obj: object) -> str:
    """Short 'type value' description of a found object for error messages."""
    text = repr(obj)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(obj).__name__} {text}"


def _position(name: str, flat_index: int, shape: Sequence[int]) -> str:
    """Render `name[i][j]...` for a flat index into the leading dims `shape`."""
    index = []
    for size in reversed(shape):
        flat_index, rem = divmod(flat_index, size)
        index.append(rem)
    return name + "".join(f"[{i}]" for i in reversed(index))


def refuse_valueless_arrays(obj: object, name: str) -> None:
    """Arrays that hold no values for some entries are refused by every backend alike.

    A tensor on torch's meta device has a shape but no data; a NumPy masked array has entries
    whose value is hidden. Both are told apart by duck typing, without importing the libraries.
    """
    if getattr(obj, "is_meta", False) is True:
        raise TypeError(
            f"{name}: a tensor on the meta device has a shape but no values; expected data "
            f"(a tensor on cpu or cuda, an array or nested lists)"
        )
    if type(obj).__name__ == "MaskedArray" and callable(getattr(obj, "filled", None)):
        raise TypeError(
            f"{name}: a NumPy masked array has entries without a value; expected a plain array "
            f"(e.g. arr.filled(0.0)) or nested lists"
        )


def _unwrap(obj: object, name: str) -> object:
    """Call `.tolist()` on array-likes (NumPy, torch) without importing their libraries."""
    if isinstance(obj, (list, tuple)):
        return obj
    refuse_valueless_arrays(obj, name)
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        try:
            return tolist()
        except Exception as exc:  # a broken array-like: say which argument it was
            raise TypeError(f"{name}: calling .tolist() failed: {exc}") from exc
    return obj


def _leaves_and_shape(obj: object, name: str) -> tuple[list, tuple[int, ...]]:
    """Walk nested lists level by level; return the flat leaves and the (regular) shape."""
    obj = _unwrap(obj, name)
    if not isinstance(obj, (list, tuple)):
        raise TypeError(
            f"{name}: expected a matrix (nested lists of numbers or an array), "
            f"found {_describe(obj)}"
        )
    level: list = [obj]
    shape: list[int] = []
    while level and isinstance(level[0], (list, tuple)):
        if len(shape) >= MAX_DIMS:
            raise ValueError(f"{name}: nested more than {MAX_DIMS} levels deep; expected a matrix")
        width = len(level[0])
        for p, item in enumerate(level):
            if not isinstance(item, (list, tuple)):
                raise ValueError(
                    f"{name}: ragged nesting at {_position(name, p, shape)}: expected a list of "
                    f"length {width}, found {_describe(item)}"
                )
            if len(item) != width:
                raise ValueError(
                    f"{name}: ragged rows at {_position(name, p, shape)}: expected length "
                    f"{width}, found length {len(item)}"
                )
        if width == 0:
            raise ValueError(
                f"{name}: empty dimension in shape {tuple(shape) + (0,)}; expected at least "
                f"one entry along every axis"
            )
        shape.append(width)
        level = [y for x in level for y in x]
    return level, tuple(shape)


def _as_float(value: object, name: str, p: int, shape: tuple[int, ...]) -> float:
    """One data entry as a float; bools, strings, None and complex are refused."""
    kind = type(value)
    if kind is float:
        return value
    if kind is int or (isinstance(value, numbers.Real) and not isinstance(value, bool)):
        try:
            return float(value)
        except OverflowError:
            raise ValueError(
                f"{name}: number at {_position(name, p, shape)} is too large for a float"
            ) from None
    raise TypeError(
        f"{name}: expected a number at {_position(name, p, shape)}, found {_describe(value)}"
    )


def as_tensor(obj: object, name: str, *, min_dims: int = 1) -> tuple[Nested, tuple[int, ...]]:
    """Validate a numeric input and return it as nested lists of floats with its shape."""
    leaves, shape = _leaves_and_shape(obj, name)
    # the common case needs no conversion: every leaf's type is float (ids: types whose
    # metaclass defines __eq__ may not hash; this set check runs in C, 3% of an L = 256 call)
    if not set(map(id, map(type, leaves))) <= {id(float)}:
        # leaves first: a list of arrays is "an ndarray at query[0]", not "too few dims"
        leaves = [
            v if type(v) is float else _as_float(v, name, p, shape) for p, v in enumerate(leaves)
        ]
    if len(shape) < min_dims:
        expected = {1: " (n,)", 2: " (rows, columns)"}.get(min_dims, "")
        raise ValueError(
            f"{name}: expected at least {min_dims} dims{expected}, found shape {shape}"
        )
    return reshape(leaves, shape), shape


def as_matrix(obj: object, name: str) -> tuple[Nested, tuple[int, ...]]:
    """Validate a 2-D numeric input `(rows, columns)`."""
    data, shape = as_tensor(obj, name, min_dims=2)
    if len(shape) != 2:
        raise ValueError(f"{name}: expected a 2-D matrix (rows, columns), found shape {shape}")
    return data, shape


def _is_bool(value: object) -> bool:
    """A Python bool or a NumPy bool scalar (told apart from numbers without importing NumPy)."""
    kind = type(value)
    return kind is bool or (kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"))


def bool_grid(obj: object) -> tuple[int, int] | None:
    """(L, S) when `obj` is a list or tuple of L lists or tuples of S > 0 Python bools (a grid
    drawn by hand), checked row by row; None for anything else (as_mask reads that).

    GivenMask reads such a grid as it is, not through as_mask's passes over the whole table:
    each pass over 16.7 M bools (4096 tokens) holds the GIL, and a window's event loop waits."""
    if not isinstance(obj, (list, tuple)) or not obj or not isinstance(obj[0], (list, tuple)):
        return None
    width = len(obj[0])
    for row in obj:
        if not isinstance(row, (list, tuple)) or len(row) != width:
            return None
        if not set(map(type, row)) <= {bool}:
            return None
    return (len(obj), width) if width else None


def as_mask(obj: object, name: str = "attn_mask") -> tuple[Nested, tuple[int, ...], bool]:
    """Validate a mask; return (values, shape, is_bool). Bool: True = may attend; float: added."""
    leaves, shape = _leaves_and_shape(obj, name)
    if set(map(type, leaves)) <= {bool}:  # one C pass: 16.7 M cells at 4096 tokens
        return reshape(list(leaves), shape), shape, True
    if all(_is_bool(v) for v in leaves):
        return reshape([bool(v) for v in leaves], shape), shape, True
    # numbers first: a None or a string is named where it is, not a bool before it
    floats = [0.0 if _is_bool(v) else _as_float(v, name, p, shape) for p, v in enumerate(leaves)]
    for p, v in enumerate(leaves):
        if _is_bool(v):
            raise TypeError(
                f"{name}: mixes bools and numbers (bool at {_position(name, p, shape)}"
                f"); expected all bools (True = may attend) or all floats (added to the scores)"
            )
    integers = [isinstance(v, numbers.Integral) for v in leaves]  # np.int64 is an integer
    if all(integers) or (any(integers) and all(x in (0.0, 1.0) for x in floats)):
        found = "only integers" if all(integers) else "only 0s and 1s, some of them integers"
        raise TypeError(
            f"{name}: found {found}, which are ambiguous (attend, or add 1?); expected bools "
            f"(True = may attend) or floats (added to the scaled scores, -inf = masked)"
        )
    return reshape(floats, shape), shape, False


def _real(value: object, name: str, expected: str) -> float:
    """A real number (not a bool) as a float; too large for a float gives inf."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected {expected}, found {_describe(value)}")
    try:
        return float(value)
    except OverflowError:
        return math.inf


def check_scale(scale: object, E: int) -> float:
    """The softmax scale: None means 1/sqrt(E); otherwise any finite real number."""
    if scale is None:
        return 1.0 / math.sqrt(E)
    value = _real(scale, "scale", "a finite number or None")
    if not math.isfinite(value):
        raise ValueError(f"scale: expected a finite number or None, found {value}")
    return value


def check_dropout_p(dropout_p: object) -> float:
    """Dropout probability in [0, 1)."""
    value = _real(dropout_p, "dropout_p", "a number in [0, 1)")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"dropout_p: expected a number in [0, 1), found {value}")
    return value


def check_masked_rows(masked_rows: object) -> str:
    """Policy for fully masked rows: 'zero', 'nan' or 'uniform'."""
    if not isinstance(masked_rows, str) or masked_rows not in MASKED_ROWS:
        raise ValueError(
            f"masked_rows: expected one of {', '.join(map(repr, MASKED_ROWS))}, "
            f"found {_describe(masked_rows)}"
        )
    return masked_rows


def check_choice(value: object, name: str, choices: tuple[str, ...]) -> object:
    """value itself when it is one of `choices` (a kernel, a dtype, a style...)."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(choices)}, found {value!r}")
    return value


def check_flag(value: object, name: str) -> bool:
    """A True/False option such as `is_causal` or `enable_gqa`."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, found {_describe(value)}")
    return value


def check_hook(value: object, name: str, arity: int | None = None) -> None:
    """value is None or something to call (with `arity` positional arguments when given)."""
    if value is not None and not callable(value):
        raise TypeError(f"{name}: expected None or a function, found {type(value).__name__}")
    if value is None or arity is None:
        return
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # a builtin without one: let the call decide
        return
    try:
        signature.bind(*range(arity))
    except TypeError:
        raise TypeError(
            f"{name}: expected a function of {arity} arguments, found one taking {signature}"
        ) from None


def dtype_of(dtype: object, inputs: tuple, allowed: tuple[str, ...]) -> str:
    """A backward's dtype name: `dtype=` when given (a name or a NumPy/torch dtype, one of
    `allowed`), else the inputs' one common dtype when it is allowed, else "float64"."""
    if dtype is not None:
        text = str(dtype).replace("torch.", "")
        if text not in allowed:
            expected = ", ".join(allowed)
            raise ValueError(f"dtype: expected one of {expected} or None, found {dtype!r}")
        return text
    kinds = {str(getattr(x, "dtype", "")).replace("torch.", "") for x in inputs}
    return kinds.pop() if len(kinds) == 1 and kinds <= set(allowed) else "float64"


def check_grad_output(shape: tuple[int, ...], expected: tuple[int, ...]) -> None:
    """dO must have the output's shape."""
    if tuple(shape) != tuple(expected):
        raise ValueError(
            f"grad_output: expected the output's shape {tuple(expected)}, found {tuple(shape)}"
        )


def check_positive_int(value: object, name: str) -> int:
    """A count such as `num_heads`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, found {_describe(value)}")
    return int(value)


def check_mask_shape(mask_shape: tuple[int, ...], target: tuple[int, ...]) -> None:
    """A mask must broadcast to the scores' shape (..., L, S)."""
    ok = len(mask_shape) <= len(target) and all(
        m in (1, t) for m, t in zip(reversed(mask_shape), reversed(target))
    )
    if not ok:
        raise ValueError(
            f"attn_mask: expected shape (L, S) = {target[-2:]} or one that broadcasts to "
            f"{target}, found shape {mask_shape}"
        )


def check_projections(w_q: object, w_k: object, w_v: object) -> None:
    """multi_head_attention needs all three projections (a trace may leave them out)."""
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)):
        if w is None:
            raise TypeError(f"{name}: expected a projection matrix, found None")


def check_head_counts(num_heads: object, num_kv_heads: object) -> tuple[int, int]:
    """(H, Hkv): positive counts, Hkv = H when None, and Hkv dividing H (grouped-query)."""
    H = check_positive_int(num_heads, "num_heads")
    Hkv = H if num_kv_heads is None else check_positive_int(num_kv_heads, "num_kv_heads")
    if H % Hkv:
        raise ValueError(f"num_kv_heads: {Hkv} does not divide num_heads = {H}")
    return H, Hkv


def check_value_has_key(key: object, value: object) -> None:
    """A separate value input only makes sense next to a key input (cross-attention)."""
    if key is None and value is not None:
        raise ValueError("value: given without key; pass key as well (key=x for self-attention)")
