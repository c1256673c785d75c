"""Session files: reading, validating and atomically saving sessions as JSON (no Qt)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence

import scratch
from gui.state import variant_session
from gui.state.session import (
    GRAD_OUTPUTS,
    MASKED_ROWS,
    MAX_CELL,
    MAX_DIM,
    MAX_HEADS,
    MAX_SEED,
    MAX_TOKENS,
    MODES,
    SCALE_MODES,
    VERSION,
    GivenGrad,
    Matrix,
    Session,
    SessionError,
    with_fitting_grad,
)
from gui.state.variant_session import variant_cells
from scratch.ops import atomic
from scratch.variants import VariantChoice, causal_cells

# the mask options of version 2 files: read into the variant's one mask (`_one_mask`)
MASK_MODES = ("none", "causal-top-left", "causal-bottom-right", "custom")


def _fail(field: str, expected: str, found: object) -> SessionError:
    """The error for one field: what was expected and what was found."""
    return SessionError(f"session field '{field}': expected {expected}, found {found!r}")


def _int(data: Mapping, field: str, lo: int, hi: int) -> int:
    v = data.get(field)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise _fail(field, f"an integer in [{lo}, {hi}]", v)
    return v


def _choice(data: Mapping, field: str, choices: Sequence[str]) -> str:
    v = data.get(field)
    if v not in choices:
        raise _fail(field, "one of " + ", ".join(repr(c) for c in choices), v)
    return v


def _labels(data: Mapping, field: str, count: int) -> tuple[str, ...]:
    v = data.get(field)
    if not isinstance(v, list) or len(v) != count or not all(isinstance(t, str) for t in v):
        raise _fail(field, f"a list of {count} strings", v)
    for t in v:  # the label editor is one comma-separated line: labels must survive it
        if "," in t or not t.strip() or t != t.strip():
            raise _fail(field, "non-empty labels without commas or outer spaces", t)
    return tuple(v)


def _matrix(data: Mapping, field: str, rows: int | None, cols: int | None) -> Matrix:
    v = data.get(field)
    if not isinstance(v, list) or not v:
        raise _fail(field, "a non-empty list of rows", v)
    if rows is not None and len(v) != rows:
        raise _fail(field, f"{rows} rows", f"{len(v)} rows")
    width = cols if cols is not None else (len(v[0]) if isinstance(v[0], list) else -1)
    if not 1 <= width <= MAX_DIM:
        raise _fail(f"{field}[0]", f"a list of 1 to {MAX_DIM} numbers", v[0])
    out = []
    for i, row in enumerate(v):
        if not isinstance(row, list) or len(row) != width:
            raise _fail(f"{field}[{i}]", f"a list of {width} numbers", row)
        for j, cell in enumerate(row):
            ok = isinstance(cell, int | float) and not isinstance(cell, bool)
            if not ok or not math.isfinite(cell) or abs(cell) > MAX_CELL:
                within = f"a number from -{MAX_CELL:g} to {MAX_CELL:g}"
                raise _fail(f"{field}[{i}][{j}]", within, cell)
        out.append(tuple(float(c) for c in row))
    return tuple(out)


def _given_grad(v: object) -> GivenGrad | None:
    """The dO a session came with (a training run's), or None; absent in older files."""
    if v is None:
        return None
    if not isinstance(v, Mapping) or set(v) != {"values", "source"}:
        raise _fail("grad_given", "null or {'values': rows, 'source': text}", v)
    if not isinstance(v["source"], str):
        raise _fail("grad_given.source", "a string", v["source"])
    values = _matrix({"grad_given.values": v["values"]}, "grad_given.values", None, None)
    return GivenGrad(values, v["source"])


def _optional_matrix(data: Mapping, field: str, rows: int | None, cols: int | None):
    return None if data.get(field) is None else _matrix(data, field, rows, cols)


def _mask(data: Mapping, rows: int, cols: int):
    """A version 2 file's drawn mask (None when it has none)."""
    v = data.get("mask")
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != rows:
        raise _fail("mask", f"{rows} rows of booleans", v)
    for i, row in enumerate(v):
        if (
            not isinstance(row, list)
            or len(row) != cols
            or not all(isinstance(b, bool) for b in row)
        ):
            raise _fail(f"mask[{i}]", f"a list of {cols} booleans", row)
    return tuple(tuple(r) for r in v)


def _one_mask(data: Mapping, variant: object, L: int, S: int, H: int) -> object:
    """A version 2 file's two masks (mask_mode with its drawn mask, and the variant's) as the
    one choice: the file's masks alone, or, when it has both, the grid a key had to pass both
    of, drawn. Its drawn cells stay with the choice (drawn again when 'drawn' is chosen)."""
    mode, mask = _choice(data, "mask_mode", MASK_MODES), _mask(data, L, S)
    kept = dataclasses.replace(variant, drawn=mask) if mask is not None else variant
    if mode == "none" or (mode == "custom" and mask is None):  # an empty custom: every key
        return kept
    align = mode.removeprefix("causal-") if mode != "custom" else variant.align
    alone = "drawn" if mode == "custom" else "causal"
    # alone when the variant has no mask, and the alignment moves no ALiBi slope
    same = not variant.alibi or align == variant.align or L == S
    if variant.mask == "none" and same:
        return dataclasses.replace(kept, mask=alone, align=align)
    grid = mask if mode == "custom" else causal_cells(L, S, align)
    cells = variant_cells(variant, L, S, H, range(L), range(S))
    if cells is not None:
        grid = [[a and b for a, b in zip(r, c)] for r, c in zip(grid, cells)]
    return dataclasses.replace(variant, mask="drawn", drawn=tuple(map(tuple, grid)))


def _shape(m: Matrix | None) -> tuple[int, int] | None:
    """(rows, columns) of a stored matrix, None for an absent one."""
    return None if m is None else (len(m), len(m[0]))


def _plan_heads(mode, query, key, value, w_q, w_k, w_v, heads: int, kv_heads: int) -> None:
    """plan_multi_head on the shapes the backends will get; SessionError names the field."""
    try:
        scratch.plan_multi_head(
            _shape(query),
            _shape(key),
            _shape(value),
            w_q=_shape(w_q),
            w_k=_shape(w_k),
            w_v=_shape(w_v),
            num_heads=heads,
            num_kv_heads=kv_heads,
        )
    except ValueError as exc:
        argument = str(exc).split(":", 1)[0]
        # without projections the tables are q, k, v themselves: their columns are the heads
        fields = {"w_q": "query", "w_k": "key", "w_v": "value"}
        field = argument if mode == "project" and argument.startswith("w_") else None
        field = field or fields.get(argument, argument)
        raise SessionError(f"session field '{field}': {exc}") from exc


def _upgraded(data: dict) -> dict:
    """A version 1 session (the query table stored as "x") as version 2; others unchanged
    (version 2's mask_mode and mask are read into the variant by `_one_mask`)."""
    if data.get("version") != 1 or "query" in data:
        return data
    upgraded = {k: v for k, v in data.items() if k != "x"}
    return {**upgraded, "version": 2, "query": data.get("x")}


def validate(data: object, backends: Mapping[str, Sequence[str]] | None = None) -> Session:
    """Check every field of a session dict and build the Session; SessionError names the field.

    `backends` maps each available backend name to its dtype names; None skips that check.
    """
    if not isinstance(data, dict):
        raise _fail("<top level>", "a JSON object", type(data).__name__)
    data = _upgraded(data)
    old = data.get("version") == 2  # its mask_mode and mask become the variant's mask
    if data.get("version") != VERSION and not old:
        raise _fail("version", f"{VERSION} (or 1 or 2, read as {VERSION})", data.get("version"))
    known = {f.name for f in dataclasses.fields(Session)} | {"version"}
    known |= {"mask_mode", "mask"} if old else set()
    unknown = sorted(set(data) - known)
    if unknown:
        raise SessionError(f"session has unknown fields: {', '.join(unknown)}")
    # step 1: options
    mode = _choice(data, "mode", MODES)
    heads = _int(data, "num_heads", 1, MAX_HEADS)
    kv_heads = _int(data, "num_kv_heads", 1, heads)
    if heads % kv_heads:
        raise _fail("num_kv_heads", f"a divisor of num_heads={heads}", kv_heads)
    scale_mode = _choice(data, "scale_mode", SCALE_MODES)
    scale_value = data.get("scale_value")
    ok = isinstance(scale_value, int | float) and not isinstance(scale_value, bool)
    if not ok or not math.isfinite(scale_value):
        raise _fail("scale_value", "a finite number", scale_value)
    masked_rows = _choice(data, "masked_rows", MASKED_ROWS)
    backend, dtype = data.get("backend"), data.get("dtype")
    if backends is not None:
        backend = _choice(data, "backend", list(backends))
        dtype = _choice(data, "dtype", list(backends[backend]))
    elif not isinstance(backend, str) or not isinstance(dtype, str):
        raise _fail("backend/dtype", "strings", (backend, dtype))
    for field in ("preset", "step"):
        if not isinstance(data.get(field), str):
            raise _fail(field, "a string", data.get(field))
    seed = _int(data, "seed", 0, MAX_SEED)
    # the dO choice of the backward view: absent in files written before it existed
    grads = {"grad_output": "ones", "grad_seed": 0, **data}
    grad_output = _choice(grads, "grad_output", GRAD_OUTPUTS)
    grad_seed = _int(grads, "grad_seed", 0, MAX_SEED)
    grad_given = _given_grad(data.get("grad_given"))
    if grad_output == "training" and grad_given is None:
        raise _fail("grad_given", "the dO of grad_output 'training'", None)
    # the variant and the decode step: absent in files written before them (none, off)
    try:
        variant = VariantChoice.from_dict(data.get("variant", {}))
    except ValueError as exc:
        raise SessionError(f"session field 'variant': {exc}") from None
    decode = _int({"decode": 0, **data}, "decode", 0, MAX_TOKENS)
    # step 2: matrices, with the shapes the mode implies
    query = _matrix(data, "query", None, None)  # x, or q in mode 'qkv'
    L, d_model = len(query), len(query[0])
    if L > MAX_TOKENS:
        raise _fail("query", f"at most {MAX_TOKENS} rows", f"{L} rows")
    key = value = w_q = w_k = w_v = None
    if mode == "self":
        for field in ("key", "value", "w_q", "w_k", "w_v"):
            if data.get(field) is not None:
                raise _fail(field, "null in mode 'self'", "a matrix")
        S = L
    elif mode == "qkv":
        key = _matrix(data, "key", None, None)  # (S, Hkv*d_k)
        S = len(key)
        value = _matrix(data, "value", S, None)  # (S, Hkv*d_v)
    else:
        key = _optional_matrix(data, "key", None, None)
        S = len(key) if key is not None else L
        d_kv_in = len(key[0]) if key is not None else d_model
        value = _optional_matrix(data, "value", S, d_kv_in) if key is not None else None
        if key is None and data.get("value") is not None:
            raise _fail("value", "null when key is null", "a matrix")
        w_q = _matrix(data, "w_q", d_model, None)  # (d_model, H*d_k)
        w_k = _matrix(data, "w_k", d_kv_in, None)  # (d_kv_in, Hkv*d_k)
        w_v = _matrix(data, "w_v", d_kv_in, None)  # (d_kv_in, Hkv*d_v)
    if S > MAX_TOKENS:
        raise _fail("key", f"at most {MAX_TOKENS} rows", f"{S} rows")
    # step 3: how the heads split the widths: the backends' own plan and messages
    # (in mode 'self' k = x has H*d_k columns, so it splits into H heads only: said below)
    _plan_heads(
        mode, query, key, value, w_q, w_k, w_v, heads, heads if mode == "self" else kv_heads
    )
    if mode == "self" and kv_heads != heads:
        raise _fail("num_kv_heads", f"num_heads={heads} in mode 'self'", kv_heads)
    if old:
        variant = _one_mask(data, variant, L, S, heads)
    drawn = variant.drawn
    if drawn and (len(drawn) != L or any(len(row) != S for row in drawn)):
        raise _fail("variant.drawn", f"{L} rows of {S} booleans", f"{len(drawn)} rows")
    session = Session(
        tokens=_labels(data, "tokens", L),
        key_tokens=_labels(data, "key_tokens", S),
        query=query,
        key=key,
        value=value,
        w_q=w_q,
        w_k=w_k,
        w_v=w_v,
        mode=mode,
        num_heads=heads,
        num_kv_heads=kv_heads,
        scale_mode=scale_mode,
        scale_value=float(scale_value),
        masked_rows=masked_rows,
        backend=backend,
        dtype=dtype,
        preset=data["preset"],
        seed=seed,
        step=data["step"],
        grad_output=grad_output,
        grad_seed=grad_seed,
        grad_given=grad_given,
        variant=variant,
        decode=decode,
    )
    if grad_given is not None and with_fitting_grad(session).grad_given is None:
        shape = f"{len(grad_given.values)} x {len(grad_given.values[0])}"
        raise _fail("grad_given.values", f"{L} rows of {session.d_out} numbers (L x d_out)", shape)
    try:  # the variant's own checks, for these sizes
        variant_session.checked(session)
    except SessionError as exc:
        field, why = str(exc).split(": ", 1)  # "variant: left: expected ...", "decode: ..."
        raise SessionError(f"session field '{field}': {why}") from None
    return session


# ---------------------------------------------------------------- files


def dumps(s: Session) -> str:
    """The session as indented JSON text."""
    return json.dumps(s.to_dict(), indent=1, allow_nan=False)


def loads(text: str, backends: Mapping[str, Sequence[str]] | None = None) -> Session:
    """Parse and validate JSON text; SessionError on any problem."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: also Python's int digit limit
        raise SessionError(f"not valid JSON: {exc}") from exc
    try:
        return validate(data, backends)
    except SessionError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. 1e400 written as 1 and 400 0s
        raise SessionError(f"not a usable session: {exc}") from exc


def checked(s: Session, backends: Mapping[str, Sequence[str]] | None = None) -> Session:
    """`s` itself when it would load back from a file; SessionError naming the field if not."""
    validate(s.to_dict(), backends)  # to_dict is what dumps writes (JSON lists and numbers)
    return s


def save(path: str | os.PathLike, s: Session) -> None:
    """Write the session atomically."""
    atomic.write_text(path, dumps(s))


def load(path: str | os.PathLike, backends: Mapping[str, Sequence[str]] | None = None) -> Session:
    """Read and validate a session file; SessionError names the problem."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(64 * 1024 * 1024 + 1)
    except OSError as exc:
        raise SessionError(f"cannot read {os.fspath(path)!r}: {exc.strerror}") from exc
    if len(raw) > 64 * 1024 * 1024:
        raise SessionError("session file is larger than 64 MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SessionError(f"not UTF-8 text: {exc}") from exc
    return loads(text, backends)
