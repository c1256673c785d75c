"""scratch.ops.rounding: plain-Python float32/float16/bfloat16 rounding equals struct, NumPy,
torch."""

import math
import random
import struct

import numpy as np
import pytest

from scratch.ops.rounding import exp_in, round_to

EDGES = [
    65504.0,  # float16's largest
    65519.99,  # still rounds down to 65504
    65520.0,  # the tie: rounds to even, past the largest: inf
    2.0**-24,  # float16's smallest subnormal
    2.0**-25,  # a tie between 0 and it: to even (0)
    2.0**-25 * 1.0000001,  # just past the tie: up
    3 * 2.0**-26,
    1e-10,
    70000.0,
    1.0 + 2.0**-11,  # a float16 tie at 1: to even (1)
    1.0 + 3 * 2.0**-11,  # a tie: to even (1 + 2^-9)
    3.4028235677973366e38,  # float32's largest finite
    3.4028235677973366e38 * (1 + 2.0**-25),  # past the float32 tie: inf
    1.401298464324817e-45,  # float32's smallest subnormal
]


def values(seed: int, n: int) -> list[float]:
    """Signed values over exponents from below float16's subnormals to past its overflow."""
    rng = random.Random(seed)
    return [rng.choice((-1, 1)) * rng.random() * 2.0 ** rng.uniform(-30, 20) for _ in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_float16_equals_numpy_and_struct(seed):
    xs = values(seed, 20000) + EDGES + [-x for x in EDGES]
    with np.errstate(over="ignore"):
        want = np.array(xs).astype(np.float16).astype(np.float64)
    got = np.array([round_to(x, "float16") for x in xs])
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (
        f"{bad.size} differ, first {xs[bad[0]]!r}: {got[bad[0]]} vs {want[bad[0]]}"
    )
    for x in xs[:2000]:  # struct's 'e' packing: the C library's own conversion
        try:
            packed = struct.unpack("<e", struct.pack("<e", x))[0]
        except OverflowError:
            packed = math.copysign(math.inf, x)
        assert round_to(x, "float16") == packed, x


@pytest.mark.parametrize("seed", [0, 1])
def test_float32_equals_numpy(seed):
    rng = random.Random(seed)
    xs = [rng.gauss(0, 1) * 2.0 ** rng.uniform(-150, 128) for _ in range(20000)] + EDGES
    with np.errstate(over="ignore"):
        want = np.array(xs).astype(np.float32).astype(np.float64)
    got = np.array([round_to(x, "float32") for x in xs])
    assert np.array_equal(got, want)


def test_bfloat16_equals_torch():
    torch = pytest.importorskip("torch")
    xs = np.array(values(3, 20000) + EDGES[:11], dtype=np.float32)  # float32 in: one rounding
    want = torch.tensor(xs).to(torch.bfloat16).double().numpy()
    got = np.array([round_to(float(x), "bfloat16") for x in xs])
    assert np.array_equal(got, want)


def test_specials_and_exp_overflow():
    assert math.isnan(round_to(math.nan, "float16"))
    assert round_to(-math.inf, "bfloat16") == -math.inf
    assert math.copysign(1.0, round_to(-0.0, "float16")) == -1.0
    assert exp_in(89.0, "float32") == math.inf  # log(float32 max) = 88.72
    assert exp_in(88.0, "float32") < math.inf
    assert exp_in(11.1, "float16") == math.inf  # log(65504) = 11.09
    assert exp_in(1000.0, "float64") == math.inf  # math.exp raises; exp_in says inf
    with pytest.raises(ValueError, match="dtype"):
        round_to(1.0, "float8")
