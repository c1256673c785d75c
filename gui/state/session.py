"""Session model: every input and option of the window, and the pure edits the window makes.

Reading, validating and saving session files is gui/state/session_file.py. No Qt here.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import scratch
from scratch.variants import VariantChoice

# 2: the query-side table is "query" (version 1 files call it "x"); 3: one mask choice, the
# variant's (version 2 files' mask_mode and mask are read into it: gui/state/session_file.py)
VERSION = 3
# project: q = x @ w_q, k = x @ w_k, v = x @ w_v (x also feeds key/value unless key is given)
# qkv: the tables are q, k, v themselves; self: q = k = v = x (no weights)
MODES = ("project", "qkv", "self")
SCALE_MODES = ("sqrt", "none", "custom")
MASKED_ROWS = ("zero", "nan", "uniform")
# dO, the gradient the backward view starts from: d sum(output) (ones), a seeded random
# matrix, d sum(output * target) = target, a one-hot target whose cell the seed picks, or the
# one the example came with (a training run's loss gradient: Session.grad_given)
GRAD_OUTPUTS = ("ones", "random", "target", "training")
MATRICES = ("query", "key", "value", "w_q", "w_k", "w_v")
# the sizes `resized` and `regenerated` take (Session's properties of the same names)
SIZES = ("num_tokens", "num_keys", "d_model", "d_k", "d_v", "num_heads", "num_kv_heads")
MAX_TOKENS = 4096  # above 256 a NumPy/torch trace is checked on sampled rows (sampled_check)
MAX_DIM = 1024  # a real model head: all-MiniLM-L6-v2 has d_model 384 (+1 for the bias column)
MAX_HEADS = 16  # the heads spin box's range; a file may not ask for more
MAX_SEED = 2**31 - 1  # a Qt spin box holds a signed 32-bit int
# the largest |cell|: with every input and weight at most 1e50, a score of MAX_DIM-wide
# projections stays below 1e50^4 * 1024^3 ~ 1e209, far from float64's 1.8e308 (1e200 in one
# cell overflowed the scores to inf, and inf - inf made the row NaN: "every key is masked")
MAX_CELL = 1e50

Matrix = tuple[tuple[float, ...], ...]


class SessionError(ValueError):
    """A session file or dict that cannot be used; the message names the field."""


@dataclass(frozen=True)
class GivenGrad:
    """A dO the example came with: a training run's loss gradient at the layer's output."""

    values: Matrix  # (L, d_out): the heads side by side, as the output
    source: str  # where it came from, in words ("the loss's gradient at step 1,200 on ...")

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"values": [list(row) for row in self.values], "source": self.source}


@dataclass(frozen=True)
class Session:
    """Inputs and options for one worked attention example."""

    tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    # query, key, value: the tables each side of attention reads, named as in PyTorch's
    # MultiheadAttention: x and the key/value inputs in mode 'project' (key None: x feeds
    # them), x alone in mode 'self' (q = k = v = x), q, k and v themselves in mode 'qkv'
    query: Matrix  # (L, d_model): x; in mode 'qkv' q (L, H*d_k)
    key: Matrix | None = None  # (S, d_kv_in); in mode 'qkv' k (S, Hkv*d_k)
    value: Matrix | None = None  # (S, d_kv_in); in mode 'qkv' v (S, Hkv*d_v)
    w_q: Matrix | None = None  # (d_model, H*d_k)
    w_k: Matrix | None = None  # (d_kv_in, Hkv*d_k)
    w_v: Matrix | None = None  # (d_kv_in, Hkv*d_v)
    mode: str = "self"
    num_heads: int = 1
    num_kv_heads: int = 1
    scale_mode: str = "sqrt"
    scale_value: float = 1.0
    masked_rows: str = "zero"
    backend: str = "scratch"
    dtype: str = "float64"
    preset: str = "custom"
    seed: int = 0
    step: str = "weights"
    grad_output: str = "ones"  # one of GRAD_OUTPUTS (files without it load as "ones")
    grad_seed: int = 0  # seed of the random dO or of the one-hot target
    grad_given: GivenGrad | None = None  # the dO "training" reads (None: the example has none)
    # the attention variant: the one mask (none, causal, window, ..., a drawn grid), score
    # changes, sinks, RoPE (scratch's plain data); and the decode step (0: off; n: token n-1
    # queries the n cached tokens); gui/state/variant_session.py
    variant: VariantChoice = VariantChoice()
    decode: int = 0

    @property
    def d_out(self) -> int:
        """Width of the output (and of dO): the heads side by side, H * d_v (no w_o here)."""
        return self.num_heads * self.d_v

    @property
    def num_tokens(self) -> int:
        """L, the number of queries."""
        return len(self.query)

    @property
    def num_keys(self) -> int:
        """S, the number of keys."""
        return len(self.key) if self.key is not None else len(self.query)

    @property
    def d_model(self) -> int:
        """Width of the query table: x's, or q's in mode 'qkv'."""
        return len(self.query[0])

    @property
    def d_k(self) -> int:
        """Query/key width of one head."""
        if self.mode == "project":
            return len(self.w_q[0]) // self.num_heads
        return self.d_model // self.num_heads

    @property
    def d_v(self) -> int:
        """Value width of one head."""
        if self.mode == "project":
            return len(self.w_v[0]) // self.num_kv_heads
        if self.mode == "qkv":
            return len(self.value[0]) // self.num_kv_heads
        return self.d_model // self.num_heads

    def matrix(self, name: str) -> Matrix | None:
        """The matrix stored under `name` (one of MATRICES)."""
        return getattr(self, name)

    def matrices_in_use(self) -> list[str]:
        """Names of the matrices the current mode uses, in table order."""
        if self.mode == "self":
            return ["query"]
        if self.mode == "qkv":
            return ["query", "key", "value"]
        names = ["query"] + [n for n in ("key", "value") if self.matrix(n) is not None]
        return names + ["w_q", "w_k", "w_v"]

    def to_dict(self) -> dict:
        """A JSON-ready dict (lists, not tuples) with the version field."""
        data = {"version": VERSION}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, tuple):
                value = [list(row) if isinstance(row, tuple) else row for row in value]
            elif isinstance(value, VariantChoice | GivenGrad):
                value = value.to_dict()
            data[field.name] = value
        return data


# ---------------------------------------------------------------- building sessions


def cell_count(s: Session) -> int:
    """How many numbers the session's tables hold (what a copy of it costs to keep)."""
    return sum(len(m) * len(m[0]) for m in map(s.matrix, MATRICES) if m)


def default_tokens(count: int, prefix: str = "t") -> tuple[str, ...]:
    """Labels t0, t1, ... for `count` tokens."""
    return tuple(f"{prefix}{i}" for i in range(count))


def as_matrix(rows: object) -> Matrix | None:
    """Nested sequence (or array with tolist) -> tuple of tuples of floats."""
    if rows is None:
        return None
    if hasattr(rows, "tolist"):
        rows = rows.tolist()
    return tuple(tuple(float(v) for v in row) for row in rows)


def random_matrix(rng: random.Random, rows: int, cols: int) -> Matrix:
    """Seeded values in [-1, 1] rounded to 2 decimals so they read well in the cells."""
    return tuple(tuple(round(rng.uniform(-1.0, 1.0), 2) for _ in range(cols)) for _ in range(rows))


def random_session(
    seed: int = 0,
    num_tokens: int = 4,
    d_model: int = 4,
    d_k: int = 2,
    d_v: int = 2,
    num_heads: int = 2,
    num_kv_heads: int | None = None,
) -> Session:
    """A projected self-attention example drawn from random.Random(seed)."""
    kv = num_kv_heads or num_heads
    rng = random.Random(seed)
    x = random_matrix(rng, num_tokens, d_model)  # (L, d_model)
    w_q = random_matrix(rng, d_model, num_heads * d_k)  # (d_model, H*d_k)
    w_k = random_matrix(rng, d_model, kv * d_k)  # (d_model, Hkv*d_k)
    w_v = random_matrix(rng, d_model, kv * d_v)  # (d_model, Hkv*d_v)
    tokens = default_tokens(num_tokens)
    return Session(
        tokens=tokens,
        key_tokens=tokens,
        query=x,
        w_q=w_q,
        w_k=w_k,
        w_v=w_v,
        mode="project",
        num_heads=num_heads,
        num_kv_heads=kv,
        preset="random",
        seed=seed,
    )


def from_preset(preset: object) -> Session:
    """Turn a scratch Preset (name, tokens, x, key/value, w_*, scale, ...) into a session."""
    x = as_matrix(preset.x)
    key = as_matrix(getattr(preset, "key", None))
    value = as_matrix(getattr(preset, "value", None))
    w_q = as_matrix(getattr(preset, "w_q", None))
    w_k = as_matrix(getattr(preset, "w_k", None))
    w_v = as_matrix(getattr(preset, "w_v", None))
    if w_q is not None:
        mode = "project"
    elif key is not None or value is not None:
        mode = "qkv"
        key = key if key is not None else x
        value = value if value is not None else key
    else:
        mode = "self"
    tokens = tuple(getattr(preset, "tokens", None) or default_tokens(len(x)))
    num_keys = len(key) if key is not None else len(x)
    key_tokens = tuple(getattr(preset, "key_tokens", None) or ())
    if len(key_tokens) != num_keys:
        key_tokens = tokens if num_keys == len(tokens) and key is None else default_tokens(num_keys)
    heads = int(getattr(preset, "num_heads", 1) or 1)
    kv_heads = int(getattr(preset, "num_kv_heads", None) or heads)
    scale = getattr(preset, "scale", None)
    scale_mode, scale_value = "sqrt", 1.0  # also for a given scale that is 1/sqrt(d_k)
    d_k = (len(w_q[0]) if w_q is not None else len(x[0])) // heads  # H*d_k // H
    if scale is not None and abs(float(scale) - 1 / math.sqrt(d_k)) > 1e-12 * float(scale):
        scale_mode, scale_value = ("none", 1.0) if scale == 1.0 else ("custom", float(scale))
    causal = VariantChoice(mask="causal", align="top-left")  # SDPA's is_causal
    return Session(
        tokens=tokens,
        key_tokens=key_tokens,
        query=x,
        key=key if mode != "self" else None,
        value=value if mode != "self" else None,
        w_q=w_q,
        w_k=w_k,
        w_v=w_v,
        mode=mode,
        num_heads=heads,
        num_kv_heads=kv_heads,
        scale_mode=scale_mode,
        scale_value=scale_value,
        preset=str(getattr(preset, "name", "custom")),
        variant=causal if getattr(preset, "is_causal", False) else VariantChoice(),
    )


# ---------------------------------------------------------------- edits (pure)


def resize_matrix(m: tuple | None, rows: int, cols: int, fill: object = 0.0) -> tuple | None:
    """Keep the cells that still fit, fill new cells with `fill` (a mask's: True, may attend)."""
    if m is None:
        return None
    out = []
    for i in range(rows):
        old = m[i] if i < len(m) else ()
        out.append(tuple(old[c] if c < len(old) else fill for c in range(cols)))
    return tuple(out)


def resize_labels(labels: Sequence[str], count: int) -> tuple[str, ...]:
    """Keep the first labels, add t<i> for new positions."""
    return tuple(labels[i] if i < len(labels) else f"t{i}" for i in range(count))


def resized(s: Session, **sizes: int) -> Session:
    """A copy with new `sizes` (any of SIZES; 0 or None: unchanged); values that still fit
    are kept (a given dO only while its shape does)."""
    unknown = sorted(set(sizes) - set(SIZES))
    if unknown:
        raise TypeError(f"resized: unknown sizes {unknown}; expected some of {', '.join(SIZES)}")
    L, S, dm, dk, dv, H, Hkv = (sizes.get(name) or getattr(s, name) for name in SIZES)
    if s.num_kv_heads == s.num_heads and sizes.get("num_heads") and not sizes.get("num_kv_heads"):
        Hkv = H  # kv heads follow the heads unless the user set them apart
    cross = s.key is not None
    S = S if cross else L
    # every head's columns side by side must fit a matrix: SessionError says which product
    for what, width in (
        ("heads x d_k", H * dk),
        ("kv heads x d_k", Hkv * dk),
        ("kv heads x d_v", Hkv * dv),
    ):
        if width > MAX_DIM:
            raise SessionError(f"{what} = {width} exceeds {MAX_DIM}")
    if s.mode == "self":
        changes = dict(query=resize_matrix(s.query, L, dm))  # x (L, d_model)
    else:  # the plan's shapes: x, key, value and W's (project) or q, k, v themselves (qkv)
        inputs = (dm, len(s.key[0]) if cross else dm) if s.mode == "project" else None
        shapes = scratch.shapes_for_heads(L, S, (H, Hkv), dk, dv, inputs)
        changes = {name: resize_matrix(s.matrix(name), *shape) for name, shape in shapes.items()}
    key_tokens = resize_labels(s.key_tokens, S) if cross else resize_labels(s.tokens, L)
    resized_s = dataclasses.replace(
        s,
        tokens=resize_labels(s.tokens, L),
        key_tokens=key_tokens,
        variant=with_drawn_size(s.variant, L, S),
        num_heads=H,
        num_kv_heads=Hkv,
        preset="custom",
        decode=min(s.decode, L),
        **changes,
    )
    return with_fitting_grad(resized_s)


def regenerated(s: Session, **sizes: int) -> Session:
    """New sizes for a session: a random example is drawn again at those sizes (its options
    kept); any other session is resized, keeping the values that still fit."""
    shape = resized(s, **sizes)  # a random example: the same size rules (kv heads follow heads)
    if s.preset != "random" or s.mode != "project" or s.key is not None:
        return shape
    heads = (shape.num_heads, shape.num_kv_heads)
    fresh = random_session(s.seed, shape.num_tokens, shape.d_model, shape.d_k, shape.d_v, *heads)
    return dataclasses.replace(fresh, **kept_options(s), step=s.step, decode=shape.decode)


def random_like(s: Session, seed: int) -> Session:
    """A random example drawn from `seed` at the sizes of `s` (2 heads unless `s` projects)."""
    heads = (s.num_heads, s.num_kv_heads) if s.mode == "project" else (2, 2)
    return random_session(seed, s.num_tokens, max(s.d_model, 2), s.d_k, s.d_v, *heads)


def kept_on_preset(s: Session) -> dict:
    """What a newly chosen example keeps from the old session: backend, dtype, masked rows
    and the dO choice."""
    return dict(
        backend=s.backend,
        dtype=s.dtype,
        masked_rows=s.masked_rows,
        grad_output="ones" if s.grad_output == "training" else s.grad_output,  # not the new one's
        grad_seed=s.grad_seed,
    )


def with_preset(s: Session, name: str, preset: object = None) -> Session:
    """The session after choosing `name` in the preset box ('custom', 'random' or a preset).

    'custom' only renames; 'random' draws a random example at the current sizes and seed;
    a preset (the scratch Preset object `preset`) replaces the example."""
    if name == "custom":
        return dataclasses.replace(s, preset="custom")
    if name == "random":
        fresh = random_like(s, s.seed)
    elif preset is None:
        raise SessionError(f"preset: expected the scratch Preset for {name!r}, found None")
    else:
        fresh = from_preset(preset)
    return dataclasses.replace(fresh, **kept_on_preset(s))


def reseeded(s: Session, seed: int) -> Session:
    """A new seed: a random example is drawn again (its options kept); others only store it."""
    if s.preset != "random":
        return dataclasses.replace(s, seed=seed)
    return dataclasses.replace(random_like(s, seed), **kept_options(s))


def with_backend(s: Session, backend: str, dtypes: Sequence[str]) -> Session:
    """Another backend; the dtype stays when the backend has it, else its first dtype."""
    dtype = s.dtype if s.dtype in dtypes else dtypes[0]
    return dataclasses.replace(s, backend=backend, dtype=dtype)


def with_options(
    s: Session, scale_mode: str, scale_value: float, masked_rows: str, dtype: str
) -> Session:
    """New scale, masked-rows and dtype options."""
    return dataclasses.replace(
        s,
        scale_mode=scale_mode,
        scale_value=scale_value,
        masked_rows=masked_rows,
        dtype=dtype or s.dtype,
    )


def with_grad_output(s: Session, kind: str, seed: int) -> Session:
    """Another dO for the backward view: `kind` one of GRAD_OUTPUTS ('training' only when the
    example came with one), `seed` in [0, MAX_SEED]."""
    if kind not in GRAD_OUTPUTS:
        raise SessionError(f"dO: expected one of {', '.join(GRAD_OUTPUTS)}, found {kind!r}")
    if kind == "training" and s.grad_given is None:
        raise SessionError("dO: 'training' needs an example opened from a training run")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise SessionError(f"dO seed: expected an integer in [0, {MAX_SEED}], found {seed!r}")
    return dataclasses.replace(s, grad_output=kind, grad_seed=seed)


def with_fitting_grad(s: Session) -> Session:
    """`s`, without its given dO when that no longer has the output's shape (L, d_out)."""
    given = s.grad_given
    if given is None or (len(given.values), len(given.values[0])) == (s.num_tokens, s.d_out):
        return s
    kind = "ones" if s.grad_output == "training" else s.grad_output
    return dataclasses.replace(s, grad_given=None, grad_output=kind)


def parse_tokens(text: str, count: int, field: str) -> tuple[str, ...]:
    """Comma-separated labels; ValueError says how many were expected and found."""
    labels = tuple(t.strip() for t in text.split(",")) if text.strip() else ()
    if len(labels) != count:
        raise ValueError(f"{field}: expected {count} comma-separated labels, found {len(labels)}")
    if not all(labels):
        empty = labels.index("") + 1
        raise ValueError(f"{field}: label {empty} of {count} is empty; expected a word there")
    return labels


def with_labels(s: Session, tokens_text: str, key_tokens_text: str) -> Session:
    """New token labels from the two comma-separated lines (key labels only with a key input);
    `s` itself when nothing changed."""
    tokens = parse_tokens(tokens_text, s.num_tokens, "tokens")
    keys = parse_tokens(key_tokens_text, s.num_keys, "key tokens") if s.key is not None else tokens
    if (tokens, keys) == (s.tokens, s.key_tokens):
        return s
    return dataclasses.replace(s, tokens=tokens, key_tokens=keys)


def kept_options(s: Session) -> dict:
    """The options a new random example keeps from the old one: those a newly chosen example
    keeps, the scale and the variant (a drawn mask does not: it belongs to the old example)."""
    scale = dict(scale_mode=s.scale_mode, scale_value=s.scale_value)
    return dict(kept_on_preset(s), **scale, variant=without_drawn(s.variant))


def with_cell(s: Session, name: str, i: int, j: int, value: float) -> Session:
    """A copy with matrix `name`[i][j] set to `value` (must be finite)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise SessionError(f"{name}[{i}][{j}]: expected a finite number, found {value!r}")
    if abs(value) > MAX_CELL:
        raise SessionError(
            f"{name}[{i}][{j}]: expected a number from -{MAX_CELL:g} to {MAX_CELL:g} (larger "
            f"ones overflow the scores in float64), found {value!r}"
        )
    rows = list(s.matrix(name))  # the other rows stay the same tuples (undo keeps many copies)
    row = list(rows[i])
    row[j] = float(value)
    rows[i] = tuple(row)
    return dataclasses.replace(s, preset="custom", **{name: tuple(rows)})


def with_drawn_size(v: VariantChoice, rows: int, cols: int) -> VariantChoice:
    """The choice with its drawn grid resized (kept cells stay, new cells may attend)."""
    if not v.drawn:
        return v
    return dataclasses.replace(v, drawn=resize_matrix(v.drawn, rows, cols, fill=True))


def without_drawn(v: VariantChoice) -> VariantChoice:
    """The choice without a drawn grid (a drawn mask chosen becomes none)."""
    if not v.drawn and v.mask != "drawn":
        return v
    return dataclasses.replace(v, mask="none" if v.mask == "drawn" else v.mask, drawn=())
