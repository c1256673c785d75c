"""scratch.rotary: both pairings pinned with numbers, against a complex-number form, against
transformers' Llama rotary, partial rotary_dim, explicit positions, and its backward.

Tolerance: each output is a 2-term fsum of products (correctly rounded) and NumPy's complex
product rounds a few times more: below 4 * 2.2e-16 * |x| < 1e-14 for |x| < 5.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

import scratch
from scratch.ops.rope import angles, rotary_words

TOL = 1e-14


def randn(rng: random.Random, *shape: int) -> list:
    return [randn(rng, *shape[1:]) for _ in range(shape[0])] if shape else rng.gauss(0, 1)


def complex_form(x, positions, base, pairing, rotary_dim=None) -> np.ndarray:
    """Each pair (a, b) as a + ib, multiplied by exp(i * position * base^(-2k/rotary_dim))."""
    x = np.array(x, dtype=np.float64)
    D = x.shape[-1]
    rd = D if rotary_dim is None else rotary_dim
    k = np.arange(rd // 2)
    if pairing == "half":
        a, b = k, k + rd // 2
    else:
        a, b = 2 * k, 2 * k + 1
    turn = np.exp(1j * np.outer(positions, base ** (-2.0 * k / rd)))  # (L, rd/2)
    z = (x[..., a] + 1j * x[..., b]) * turn
    out = x.copy()
    out[..., a], out[..., b] = z.real, z.imag
    return out


def test_pairings_pinned_with_numbers():
    """D = 4, position 1: pair 0 turns by 1 radian, pair 1 by 1/100 (base 10000, 10000^(-1/2))."""
    x = [[1.0, 0.0, 0.0, 0.0]]
    c, s = math.cos(1.0), math.sin(1.0)
    assert scratch.rotary(x, [1], pairing="half") == [[c, 0.0, s, 0.0]]  # pair (0, 2)
    assert scratch.rotary(x, [1], pairing="interleaved") == [[c, s, 0.0, 0.0]]  # pair (0, 1)
    y = [[0.0, 1.0, 0.0, 0.0]]  # feature 1: half pairs it with 3 (angle 0.01)
    assert scratch.rotary(y, [1], pairing="half") == [[0.0, math.cos(0.01), 0.0, math.sin(0.01)]]
    assert angles(3, 4) == [3.0, 3 * 10000.0**-0.5]


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [None, 4, 2])
@pytest.mark.parametrize("seed", range(3))
def test_matches_the_complex_form(pairing, rotary_dim, seed):
    """Batch and heads (2, 3, L = 5, D = 6), partial rotary_dim, base 500, positions given."""
    rng = random.Random(seed)
    x = randn(rng, 2, 3, 5, 6)
    positions = [rng.randrange(0, 4000) for _ in range(5)]
    ours = scratch.rotary(x, positions, base=500.0, pairing=pairing, rotary_dim=rotary_dim)
    ref = complex_form(x, positions, 500.0, pairing, rotary_dim)
    assert np.abs(np.array(ours) - ref).max() <= TOL
    if rotary_dim is not None:  # features past rotary_dim pass through unchanged
        assert np.array_equal(np.array(ours)[..., rotary_dim:], np.array(x)[..., rotary_dim:])


def llama_rotary():
    """transformers' own rotate_half and apply_rotary_pos_emb, read from modeling_llama.py.

    Importing transformers' Llama module costs about 8 s on a loaded 2-core machine; the two
    functions need only torch, so their source is taken from the installed file and run as it
    is (the hub-kernel decorator, which only swaps in optional kernels, left off).
    """
    import ast
    import importlib.util
    from pathlib import Path

    import torch

    spec = importlib.util.find_spec("transformers")
    if spec is None:
        pytest.skip("transformers is not installed")
    path = Path(spec.origin).parent / "models" / "llama" / "modeling_llama.py"
    tree = ast.parse(path.read_text())
    wanted = {"rotate_half", "apply_rotary_pos_emb"}
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {f.name for f in funcs} == wanted, f"{path}: the functions moved"
    for f in funcs:
        f.decorator_list = []
    space = {"torch": torch}
    exec(compile(ast.Module(funcs, []), str(path), "exec"), space)
    return space["apply_rotary_pos_emb"]


def test_half_pairing_matches_transformers_llama():
    """transformers' apply_rotary_pos_emb (rotate_half) with float64 cos/sin of the same angles."""
    torch = pytest.importorskip("torch")
    apply_rotary_pos_emb = llama_rotary()
    rng = random.Random(7)
    q, k = randn(rng, 1, 2, 6, 8), randn(rng, 1, 2, 6, 8)
    positions = [3, 4, 5, 6, 7, 8]
    theta = torch.tensor([angles(p, 8) for p in positions], dtype=torch.float64)  # (L, 4)
    emb = torch.cat([theta, theta], dim=-1)  # Llama's cos/sin layout (L, D)
    cos, sin = emb.cos()[None], emb.sin()[None]
    tq, tk = apply_rotary_pos_emb(
        torch.tensor(q, dtype=torch.float64), torch.tensor(k, dtype=torch.float64), cos, sin
    )
    for ours, ref in ((scratch.rotary(q, positions), tq), (scratch.rotary(k, positions), tk)):
        assert (torch.tensor(ours, dtype=torch.float64) - ref).abs().max().item() <= TOL


def test_a_decode_step_turns_by_its_true_position():
    rng = random.Random(3)
    x = randn(rng, 8, 4)
    full = scratch.rotary(x, list(range(8)))
    assert scratch.rotary([x[7]], [7]) == [full[7]]
    assert scratch.rotary([x[7]], [0]) != [full[7]]


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_backward_is_the_transpose(pairing):
    """<rotary(x), g> == <x, rotary_backward(g)>, and the backward undoes the forward."""
    rng = random.Random(11)
    x, g = randn(rng, 2, 5, 6), randn(rng, 2, 5, 6)
    positions = [0, 1, 7, 30, 1000]
    kw = {"pairing": pairing, "rotary_dim": 4}
    y, dx = scratch.rotary(x, positions, **kw), scratch.rotary_backward(g, positions, **kw)
    flat = scratch.ops.nested.flat
    lhs = math.fsum(a * b for a, b in zip(flat(y), flat(g)))
    rhs = math.fsum(a * b for a, b in zip(flat(x), flat(dx)))
    assert abs(lhs - rhs) <= 1e-13
    back = scratch.rotary_backward(y, positions, **kw)
    assert max(abs(a - b) for a, b in zip(flat(back), flat(x))) <= TOL


def test_backward_matches_autograd():
    torch = pytest.importorskip("torch")
    rng = random.Random(12)
    x, g = randn(rng, 3, 6), randn(rng, 3, 6)
    positions = [2, 5, 9]
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    theta = torch.tensor([angles(p, 6) for p in positions], dtype=torch.float64)
    c, s = torch.cat([theta.cos()] * 2, -1), torch.cat([theta.sin()] * 2, -1)
    rotate_half = torch.cat([-t[:, 3:], t[:, :3]], -1)
    (grad,) = torch.autograd.grad(t * c + rotate_half * s, t, torch.tensor(g, dtype=torch.float64))
    ours = torch.tensor(scratch.rotary_backward(g, positions), dtype=torch.float64)
    assert (ours - grad).abs().max().item() <= TOL


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"positions": [0, 1]}, "positions"),
        ({"positions": [0, 1, 2], "rotary_dim": 3}, "rotary_dim"),
        ({"positions": [0, 1, 2], "rotary_dim": 6}, "rotary_dim"),
        ({"positions": [0, 1, 2], "pairing": "adjacent"}, "pairing"),
        ({"positions": [0, 1, 2], "base": 0.0}, "base"),
        ({"positions": [0, math.nan, 2]}, "positions"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        scratch.rotary([[1.0, 2.0, 3.0, 4.0]] * 3, **kwargs)


def test_hover_words_name_the_pair_angle_cos_and_sin():
    row = [1.0, 2.0, 3.0, 4.0]
    words = rotary_words(row, 3, 2, name="k")  # half: feature 2 pairs with 0, angle 3 rad
    c, s = math.cos(3.0), math.sin(3.0)
    value = scratch.rotary([row], [3])[0][2]
    assert value == math.fsum((3.0 * c, 1.0 * s))
    assert words == (
        f"k_rot[2] = k[2] cos + k[0] sin = 3 * {c:.4g} + 1 * {s:.4g} = {value:.4g} "
        f"(pair 0: angle 3 * 10000^(-0/4) = 3, cos {c:.4g}, sin {s:.4g})"
    )
    assert rotary_words(row, 3, 1, pairing="interleaved").startswith(
        "q_rot[1] = q[1] cos + q[0] sin"
    )
    assert rotary_words(row, 3, 3, rotary_dim=2) == "q_rot[3] = q[3] = 4 (not rotated)"


def test_positions_may_be_any_sequence_of_real_numbers():
    torch = pytest.importorskip("torch")
    x = [[1.0, 2.0]] * 5
    want = scratch.rotary(x, [0, 1, 2, 3, 4])
    given = (np.arange(5), torch.arange(5), list(np.arange(5)), np.arange(5.0), range(5))
    for positions in given:
        assert scratch.rotary(x, positions) == want, positions
        assert scratch.rotary_backward(x, positions) == scratch.rotary_backward(x, range(5))
    for bad, words in (
        (np.arange(4), r"expected one position per row \(5\), found 4"),
        ("abcde", "expected a sequence of 5 numbers"),
        ([True] * 5, "expected finite numbers, found True"),
        ([0, 1, 2, 3, math.inf], "expected finite numbers, found inf"),
    ):
        with pytest.raises(ValueError, match="^positions: " + words):
            scratch.rotary(x, bad)


def test_an_odd_last_dimension_is_named():
    with pytest.raises(ValueError, match=r"^x: the last dimension \(3\) is odd"):
        scratch.rotary([[1.0, 2.0, 3.0]], [0])
    assert scratch.rotary([[1.0, 2.0, 3.0]], [0], rotary_dim=2) == [[1.0, 2.0, 3.0]]
