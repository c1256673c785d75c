"""FlexAttention's ground truth: flex_attention and create_block_mask on nested lists, exact.

Same argument names and meaning as `torch.nn.attention.flex_attention`: query (B, H, L, E),
key (B, Hkv, S, E), value (B, Hkv, S, Ev); `score_mod(score, b, h, q_idx, kv_idx)` changes each
scaled score, `block_mask` (from `create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN)`) says which
keys each query sees; with enable_gqa query head h reads kv head h // (H // Hkv). The user's
own plain-Python functions are welcome, and so are the variants of `scratch.variants`.

Per query row, step by step (every sum a math.fsum), computed by the one head kernel
(scratch.core.attention.attend with flex=True):
  1. scores[j] = scale * q . k[j] for the keys the block mask lets the query see
  2. scores[j] = score_mod(scores[j], b, h, i, j); a score of -inf counts as masked
  3. lse = log(sum_j exp(scores[j]) + exp(sink[h])) (no sink term without `sinks`)
  4. weights[j] = exp(scores[j] - lse); output = sum_j weights[j] * v[j]
A row that sees no key (and has no sink) gives output 0 and lse -inf, as FlexAttention does;
with a learned sink it gives output 0 and lse = sink[h].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import product

from scratch.core.attention import Steps, attend
from scratch.core.front_doors import flex_door
from scratch.core.options import FlexOptions
from scratch.ops.validate import as_tensor, check_flag, check_hook, check_positive_int, check_scale
from scratch.variants.base import check_sizes
from scratch.variants.sinks import sink_logits

_BOOL_TYPES = {bool}  # answer types taken as they are; a NumPy bool's type joins once seen


def seen_by(mask_mod: Callable[..., bool], b: int, h: int, i: int, j: int) -> bool:
    """mask_mod's answer for one cell as a bool: True, False, a NumPy bool or a 0-d bool
    array or tensor (TypeError naming mask_mod and the cell otherwise: a mask_mod that forgets
    to return gives None, which would mask every key)."""
    seen = mask_mod(b, h, i, j)
    return seen if type(seen) is bool else checked_seen(seen, b, h, i, j)


def checked_seen(seen: object, b: int, h: int, i: int, j: int) -> bool:
    """One answer of mask_mod as a bool, or the TypeError `seen_by` describes. Types found to
    be bools are remembered, so a mask_mod answering np.bool_ pays the check once."""
    kind = type(seen)
    if kind in _BOOL_TYPES:
        return bool(seen)
    if "bool" in str(getattr(seen, "dtype", "")) and getattr(seen, "ndim", None) == 0:
        if kind.__module__ == "numpy":  # np.bool_ is a type of bools (a tensor's type is not)
            _BOOL_TYPES.add(kind)
        return bool(seen)
    raise TypeError(
        f"mask_mod: expected a bool for (b, h, q_idx, kv_idx) = {(b, h, i, j)}, "
        f"found {kind.__name__} {seen!r}"
    )


@dataclass(frozen=True)
class BlockMask:
    """A mask_mod with the tiles it leaves: for each (b, h, query block), the key blocks to visit.

    Derived from mask_mod by asking it about every cell, so it cannot disagree with it.

    Attributes:
        mask_mod: mask_mod(b, h, q_idx, kv_idx) -> True where the query sees the key.
        shape: (B, H, Q_LEN, KV_LEN); B or H of 1 broadcast.
        block_size: (query block, key block) sizes.
        kv_blocks: `kv_blocks[b][h][qb]` lists (key block, full) for every key block where
            some query of the block sees some key; `full` says every cell of the tile is seen
            (no mask_mod call needed).
    """

    mask_mod: Callable[..., bool]
    shape: tuple[int, int, int, int]  # (B, H, Q_LEN, KV_LEN); B or H of 1 broadcast
    block_size: tuple[int, int]
    kv_blocks: list

    def sees(self, b: int, h: int, q_idx: int, kv_idx: int) -> bool:
        """mask_mod's answer for one cell (True: the query sees the key).

        Args:
            b: the batch index.
            h: the head index.
            q_idx: the query's row i.
            kv_idx: the key's column j.
        """
        return seen_by(self.mask_mod, b, h, q_idx, kv_idx)

    def keys(self, b: int, h: int, q_idx: int) -> list[int]:
        """The keys query q_idx of (b, h) sees, visiting only the listed tiles.

        Args:
            b: the batch index.
            h: the head index.
            q_idx: the query's row i.
        """
        B, H = self.shape[:2]
        tiles = self.kv_blocks[b if B > 1 else 0][h if H > 1 else 0][q_idx // self.block_size[0]]
        n, S = self.block_size[1], self.shape[3]
        found = []
        for kb, full in tiles:
            for j in range(kb * n, min(kb * n + n, S)):
                if full or self.sees(b, h, q_idx, j):
                    found.append(j)
        return found

    def to_dense(self) -> list:
        """The mask as nested bools (B, H, Q_LEN, KV_LEN), True where the key is seen."""
        B, H, L, S = self.shape
        return [
            [[[self.sees(b, h, i, j) for j in range(S)] for i in range(L)] for h in range(H)]
            for b in range(B)
        ]


def block_mask_sizes(mask_mod, B, H, Q_LEN, KV_LEN, BLOCK_SIZE) -> tuple[int, ...]:
    """create_block_mask's arguments checked: (B, H, L, S, block rows, block keys)."""
    if not callable(mask_mod):
        raise TypeError(
            "mask_mod: expected a function (b, h, q_idx, kv_idx) -> bool, "
            f"found {type(mask_mod).__name__}"
        )
    check_hook(mask_mod, "mask_mod", arity=4)  # (b, h, q_idx, kv_idx)
    B_given, H_given = B, H
    B = 1 if B is None else check_positive_int(B, "B")
    H = 1 if H is None else check_positive_int(H, "H")
    L, S = check_positive_int(Q_LEN, "Q_LEN"), check_positive_int(KV_LEN, "KV_LEN")
    check_sizes(mask_mod, None if B_given is None else B, None if H_given is None else H, L, S)
    bq, bk = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else BLOCK_SIZE
    bq, bk = check_positive_int(bq, "BLOCK_SIZE"), check_positive_int(bk, "BLOCK_SIZE")
    return B, H, L, S, bq, bk


def check_block_mask(block_mask: object, B: int, H: int, L: int, S: int) -> None:
    """None or a BlockMask made for (B, H, L, S) (B or H of 1 broadcast)."""
    if block_mask is None:
        return
    if not isinstance(block_mask, BlockMask):
        raise TypeError("block_mask: expected None or a BlockMask from create_block_mask")
    check_block_shape(block_mask.shape, B, H, L, S)
    check_sizes(block_mask.mask_mod, B, H, L, S)


def check_block_shape(shape: tuple[int, ...], B: int, H: int, L: int, S: int) -> None:
    """A block mask (ours or torch's) must be made for (B, H, L, S) (B or H may be 1)."""
    mb, mh, ml, ms = shape
    if mb not in (1, B) or mh not in (1, H) or (ml, ms) != (L, S):
        raise ValueError(
            f"block_mask: made for shape {tuple(shape)}, expected (B, H, L, S) = "
            f"{(B, H, L, S)} (B or H may be 1)"
        )


def create_block_mask(
    mask_mod: Callable[..., bool],
    B: int | None,
    H: int | None,
    Q_LEN: int,
    KV_LEN: int,
    BLOCK_SIZE: int | tuple[int, int] = 128,
) -> BlockMask:
    """FlexAttention's create_block_mask: the tiles mask_mod leaves (B or H None: broadcast).

    Args:
        mask_mod: mask_mod(b, h, q_idx, kv_idx) -> True where the query sees the key.
        B: the batch, or None (every batch alike).
        H: the heads, or None (every head alike).
        Q_LEN: L, the queries.
        KV_LEN: S, the keys.
        BLOCK_SIZE: the tile's side, or (query block, key block).

    Returns:
        The BlockMask.

    Examples:
        >>> from scratch import create_block_mask
        >>> causal = lambda b, h, q_idx, kv_idx: kv_idx <= q_idx
        >>> create_block_mask(causal, None, None, 4, 4, BLOCK_SIZE=2).kv_blocks[0][0]
        [[(0, False)], [(0, True), (1, False)]]
    """
    B, H, L, S, bq, bk = block_mask_sizes(mask_mod, B, H, Q_LEN, KV_LEN, BLOCK_SIZE)

    def tiles(b: int, h: int, qb: int) -> list[tuple[int, bool]]:
        found = []
        for kb in range(-(-S // bk)):
            rows, cols = range(qb * bq, min(qb * bq + bq, L)), range(kb * bk, min(kb * bk + bk, S))
            cells = [mask_mod(b, h, i, j) for i in rows for j in cols]
            if not set(map(type, cells)) <= _BOOL_TYPES:  # checked cell by cell only then
                cells = [
                    checked_seen(c, b, h, i, j) for c, (i, j) in zip(cells, product(rows, cols))
                ]
            if any(cells):
                found.append((kb, all(cells)))
        return found

    kv_blocks = [
        [[tiles(b, h, qb) for qb in range(-(-L // bq))] for h in range(H)] for b in range(B)
    ]
    return BlockMask(mask_mod, (B, H, L, S), (bq, bk), kv_blocks)


@dataclass(frozen=True)
class FlexInputs:
    """Validated inputs of one flex_attention call (shared by the forward and the backward)."""

    q: list  # (B, H, L, E)
    k: list  # (B, Hkv, S, E)
    v: list  # (B, Hkv, S, Ev)
    shape: tuple[int, int, int, int, int, int, int]  # (B, H, Hkv, L, S, E, Ev)
    scale: float
    score_mod: Callable[..., float] | None
    block_mask: BlockMask | None
    sinks: list[float] | None

    @property
    def group(self) -> int:
        """Query heads per kv head."""
        return self.shape[1] // self.shape[2]


def check_call(qs, ks, vs, options: FlexOptions) -> tuple[int, ...]:
    """Check shapes (4-D), heads, score_mod and the block mask; (B, H, Hkv, L, S, E, Ev).

    Shared by every flex_attention (the ground truth's and the backends'): one wording.
    """
    score_mod, block_mask = options.score_mod, options.block_mask
    for name, s in (("query", qs), ("key", ks), ("value", vs)):
        if len(s) != 4:
            raise ValueError(f"{name}: expected 4 dims (B, H, seq, dim), found shape {s}")
    (B, H, L, E), (Bk, Hkv, S, Ek), (Bv, Hv, Sv, Ev) = qs, ks, vs
    if (Bk, Ek) != (B, E) or (Bv, Hv, Sv) != (Bk, Hkv, S):
        raise ValueError(
            f"key, value: expected key (B={B}, Hkv, S, E={E}) and value (B, Hkv, S, Ev), "
            f"found query {qs}, key {ks}, value {vs}"
        )
    gqa = check_flag(options.enable_gqa, "enable_gqa")
    if (H != Hkv and not gqa) or H % Hkv:
        raise ValueError(
            f"key: {Hkv} kv heads for {H} query heads needs enable_gqa=True and H % Hkv == 0"
        )
    check_hook(score_mod, "score_mod", arity=5)  # (score, b, h, q_idx, kv_idx)
    check_sizes(score_mod, B, H, L, S)
    check_block_mask(block_mask, B, H, L, S)
    return (B, H, Hkv, L, S, E, Ev)


def prepare(query: object, key: object, value: object, options: FlexOptions) -> FlexInputs:
    """Check the inputs (check_call) and read them as nested lists."""
    q, qs = as_tensor(query, "query", min_dims=0)
    k, ks = as_tensor(key, "key", min_dims=0)
    v, vs = as_tensor(value, "value", min_dims=0)
    shape = check_call(qs, ks, vs, options)
    scale = check_scale(options.scale, shape[5])
    sinks = sink_logits(options.sinks, shape[1])
    return FlexInputs(q, k, v, shape, scale, options.score_mod, options.block_mask, sinks)


def modified(score_mod: Callable[..., float], score: float, b: int, h: int, i: int, j: int):
    """score_mod's answer as a float (TypeError naming score_mod and the cell otherwise)."""
    s = score_mod(score, b, h, i, j)
    if isinstance(s, bool) or not isinstance(s, (int, float)):
        raise TypeError(
            f"score_mod: expected a number for (b, h, q_idx, kv_idx) = {(b, h, i, j)}, "
            f"found {type(s).__name__} {s!r}"
        )
    return float(s)


def head(x: FlexInputs, b: int, h: int) -> Steps:
    """Steps 1-4 for head h of batch b: the one head kernel (scratch.core.attention.attend) in
    FlexAttention's form, visiting the block mask's keys, score_mod's answers checked."""
    kv = h // x.group
    return attend(
        x.q[b][h],
        x.k[b][kv],
        x.v[b][kv],
        x.scale,
        b=b,
        h=h,
        score_mod=None if x.score_mod is None else partial(modified, x.score_mod),
        sink=None if x.sinks is None else x.sinks[h],
        keys=None if x.block_mask is None else partial(x.block_mask.keys, b, h),
        flex=True,
    )


def attention_of(query: object, key: object, value: object, options: FlexOptions):
    """FlexAttention in plain Python: output (B, H, L, Ev), and lse (B, H, L) with return_lse.

    Returns:
        output (B, H, L, Ev), or (output, lse (B, H, L)) with return_lse=True.

    Examples:
        >>> import scratch
        >>> from scratch.variants import Softcap
        >>> q = [[[[1.0, 0.0], [0.0, 1.0]]]]  # (B, H, L, E) = (1, 1, 2, 2)
        >>> out = scratch.flex_attention(q, q, q, score_mod=Softcap(30.0).score_mod)
        >>> len(out), len(out[0]), len(out[0][0]), len(out[0][0][0])
        (1, 1, 2, 2)
    """
    x = prepare(query, key, value, options)
    B, H = x.shape[:2]
    check_flag(options.return_lse, "return_lse")
    output, lse = [], []
    for b in range(B):
        heads = [head(x, b, h) for h in range(H)]  # step 4: output = weights @ v, seen keys
        output.append([s.output for s in heads])
        lse.append([s.lse for s in heads])
    return (output, lse) if options.return_lse else output


flex_attention = flex_door(attention_of)


__all__ = [
    "BlockMask",
    "FlexInputs",
    "check_call",
    "create_block_mask",
    "flex_attention",
]
