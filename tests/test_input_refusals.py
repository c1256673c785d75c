"""Inputs an API review found accepted in silence or refused without a name: now refused by name.

A variant's shift, ALiBi's slopes, a mask_mod's answer, a tiled backward's lse, masks of 0s
and 1s with integers among them, a None beside a bool in a mask, and the torch backend's device.
"""

import math

import pytest

import scratch
from scratch.variants import ALiBi, Causal, ChunkedLocal, PrefixLM, SlidingWindow

np = pytest.importorskip("numpy")


@pytest.mark.parametrize("shift", [math.nan, 1.5, True, "1", None])
@pytest.mark.parametrize(
    "make",
    [
        Causal,
        lambda s: SlidingWindow(1, 0, s),
        lambda s: ChunkedLocal(2, s),
        lambda s: PrefixLM(2, s),
        lambda s: ALiBi((0.5,), s),
    ],  # fmt: skip
)
def test_a_shift_that_is_not_an_integer_is_refused(make, shift):
    with pytest.raises(ValueError, match="shift: expected an integer"):
        make(shift)


def test_a_numpy_integer_shift_is_an_int():
    assert Causal(np.int64(2)) == Causal(2) and type(Causal(np.int64(2)).shift) is int


@pytest.mark.parametrize(
    ("slopes", "words"),
    [
        ([math.nan], "slopes[0]: expected a finite number, found nan"),
        ([0.5, math.inf], "slopes[1]: expected a finite number, found inf"),
        (["a"], "slopes[0]: expected a number, found 'a'"),
        ([None], "slopes[0]: expected a number, found None"),
        ([True], "slopes[0]: expected a number, found True"),
    ],
)
def test_alibi_slopes_must_be_finite_numbers(slopes, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        ALiBi(slopes)


def _forgets_return(b, h, q_idx, kv_idx):
    q_idx >= kv_idx  # noqa: B015 (the planted mistake: no return, so None)


@pytest.mark.parametrize(
    ("mask_mod", "found"),
    [
        (_forgets_return, "NoneType None"),
        (lambda b, h, q, k: "no", "str 'no'"),
        (lambda b, h, q, k: 1, "int 1"),
    ],  # fmt: skip
)
def test_a_mask_mod_that_does_not_answer_a_bool_is_refused(mask_mod, found):
    from scratch.backends.numpy_flex_plan import create_block_mask as numpy_block_mask

    for make in (scratch.create_block_mask, numpy_block_mask):
        with pytest.raises(TypeError, match=rf"mask_mod: expected a bool .* found {found}"):
            make(mask_mod, None, None, 4, 4, 2)


def test_a_mask_mod_answering_numpy_bools_is_taken():
    block = scratch.create_block_mask(lambda b, h, q, k: np.bool_(q >= k), None, None, 4, 4, 2)
    assert block.to_dense() == [[[[j <= i for j in range(4)] for i in range(4)]]]


def _forward_and_lse(mask=None, causal=False):
    from scratch.backends.numpy_backward import forward_with_lse

    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((1, 2, 5, 4)) for _ in range(4))
    output, lse = forward_with_lse(q, k, v, attn_mask=mask, is_causal=causal)
    return (q, k, v, g), output, lse


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_the_tiled_backward_refuses_an_lse_no_forward_gives(bad):
    from scratch.backends.numpy_backward import scaled_dot_product_attention_backward as bwd

    (q, k, v, g), output, lse = _forward_and_lse(causal=True)
    bwd(q, k, v, g, is_causal=True, kernel="tiled", output=output, lse=lse)  # the real one: fine
    lse[0, 1, 3] = bad
    with pytest.raises(ValueError, match=r"lse\[0\]\[1\]\[3\]: expected a finite number"):
        bwd(q, k, v, g, is_causal=True, kernel="tiled", output=output, lse=lse)


def test_a_fully_masked_rows_lse_must_be_minus_infinity():
    from scratch.backends.numpy_backward import scaled_dot_product_attention_backward as bwd

    mask = np.ones((5, 5), bool)
    mask[2] = False
    (q, k, v, g), output, lse = _forward_and_lse(mask)
    assert np.isneginf(lse[..., 2]).all()
    bwd(q, k, v, g, attn_mask=mask, kernel="tiled", output=output, lse=lse)
    lse[0, 0, 2] = 0.0
    with pytest.raises(ValueError, match=r"lse\[0\]\[0\]\[2\]: expected -inf \(a fully masked"):
        bwd(q, k, v, g, attn_mask=mask, kernel="tiled", output=output, lse=lse)


@pytest.mark.parametrize(
    ("mask", "words"),
    [
        ([[True, None], [True, True]], r"expected a number at attn_mask\[0\]\[1\], found NoneType"),
        ([[1, 0], [0, 1.0]], "only 0s and 1s, some of them integers, which are ambiguous"),
        ([[1, 0], [0, 1]], "only integers, which are ambiguous"),
    ],
)
def test_masks_refused_with_the_right_reason(mask, words):
    q = [[1.0, 0.0], [0.0, 1.0]]
    with pytest.raises(TypeError, match=words):
        scratch.scaled_dot_product_attention(q, q, q, attn_mask=mask)


def test_float_masks_with_integer_zeros_are_taken():
    q = [[1.0, 0.0], [0.0, 1.0]]
    out, _ = scratch.scaled_dot_product_attention(q, q, q, attn_mask=[[0, -math.inf], [0, 0.5]])
    assert out[0] == q[0]  # row 0 sees key 0 only


@pytest.mark.parametrize(
    ("device", "error", "words"),
    [
        ("tpu", ValueError, "device: 'tpu' is not a torch device"),
        (3.5, TypeError, "device: expected a torch device or its name, found 3.5"),
    ],  # fmt: skip
)
def test_the_torch_backend_names_a_bad_device(device, error, words):
    pytest.importorskip("torch")
    from scratch.backends import get

    q = np.ones((2, 4))
    with pytest.raises(error, match=words):
        get("torch").scaled_dot_product_attention(q, q, q, device=device)


def test_cuda_without_cuda_is_named():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this torch sees a CUDA device")
    from scratch.backends import get

    q = np.ones((2, 4))
    with pytest.raises(ValueError, match="device: 'cuda', but this torch sees no CUDA device"):
        get("torch").scaled_dot_product_attention(q, q, q, device="cuda")


@pytest.mark.parametrize("T", [-1, 0, 1.5, True])
def test_a_cache_refuses_a_token_count_that_is_not_positive(T):
    from scratch.decode.kv_cache import KVCache

    assert KVCache().positions(2) == [0, 1]
    with pytest.raises((TypeError, ValueError), match="T: expected"):
        KVCache().positions(T)


def test_mods_with_the_wrong_number_of_arguments_are_named():
    q = np.ones((1, 1, 3, 4)).tolist()
    with pytest.raises(TypeError, match=r"score_mod: expected a function of 5 arguments, found"):
        scratch.flex_attention(q, q, q, score_mod=lambda score: score)
    with pytest.raises(TypeError, match=r"mask_mod: expected a function of 4 arguments, found"):
        scratch.create_block_mask(lambda b, h, q_idx: True, None, None, 4, 4, 2)
    out = scratch.flex_attention(q, q, q, score_mod=lambda s, *cell: s)  # *args binds: taken
    assert np.asarray(out).shape == (1, 1, 3, 4)


def test_zero_d_tensor_slopes_are_numbers():
    """ALiBi took torch scalars as slopes before the finite check; it still does."""
    torch = pytest.importorskip("torch")
    assert ALiBi((torch.tensor(0.5), np.float32(0.25))).slopes == (0.5, 0.25)
    with pytest.raises(ValueError, match=r"slopes\[0\]: expected a finite number"):
        ALiBi((torch.tensor(math.nan),))


def test_numpy_bool_answers_are_checked_once_per_type():
    """A mask_mod answering np.bool_ (doc[q] == doc[kv]) is taken; its type is remembered, so
    the check does not run per cell (it made create_block_mask 15x slower at 4096 tokens)."""
    from scratch.flex import forward as flex

    doc = np.repeat(np.arange(2), 4)
    block = scratch.create_block_mask(lambda b, h, q, k: doc[q] == doc[k], None, None, 8, 8, 4)
    assert [tiles for tiles in block.kv_blocks[0][0]] == [[(0, True)], [(1, True)]]
    assert np.bool_ in flex._BOOL_TYPES
