"""The torch backend's flex_attention and flex_attention_backward against the ground truth.

Float64: every built-in variant and combinations (window + softcap + GQA + sinks, documents +
causal, L != S, B/H broadcast), through torch's FlexAttention eager and through the explicit
path, output and lse within 1e-13: both sides are float64, torch's sums have at most 8 terms of
size < 30 (8 * 2.2e-16 * 30 < 1e-13) and the ground truth is correctly rounded up to a few ulps.
The backward (the explicit path under torch.autograd on CPU) likewise. Float32: FlashAttention's
rule (scratch.bounds.tolerance.reference_error_rule): at most twice the error of the plain float32
explicit form of the same case (tests/flex_torch.explicit_forward) plus 4 ulps.
"""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

import scratch  # noqa: E402
import scratch.backends as backends  # noqa: E402
from scratch.backends.torch_flex import (  # noqa: E402
    choose_kernel,
    compile_problem,
    flex_attention,
    flex_attention_backward,
    prepare,
)
from scratch.bounds.tolerance import reference_error_rule  # noqa: E402
from scratch.core.options import FlexOptions  # noqa: E402
from tests.flex_cases import CASES, COMBINED, random_problems  # noqa: E402
from tests.flex_torch import explicit_forward, randn  # noqa: E402

TOL = 1e-13
SINKS = [0.5, -1.0, 0.25, 2.0]  # exact in float32 too
SIZES = (2, 4, 2, 5, 7, 3, 2)  # B, H, Hkv, L, S, E, Ev: GQA (2 query heads per kv head), L != S
GRADS = ("dQ", "dK", "dV", "d sinks")


def problem(seed: int, B: int, H: int, Hkv: int, L: int, S: int, E: int, Ev: int):
    """Seeded q, k, v and grad_output as nested lists."""
    rng = random.Random(seed)
    q, k, v = randn(rng, B, H, L, E), randn(rng, B, Hkv, S, E), randn(rng, B, Hkv, S, Ev)
    return q, k, v, randn(rng, B, H, L, Ev)


def block_mask(variant, B, H, L, S, size=2):
    """The ground truth's block mask of the variant (None without a mask_mod)."""
    if variant.mask_mod is None:
        return None
    return scratch.create_block_mask(variant.mask_mod, B, H, L, S, BLOCK_SIZE=size)


def gap(ours: torch.Tensor, truth: list, what: str) -> float:
    """max |ours - truth| (shape and the places of -inf checked first)."""
    truth = torch.tensor(truth, dtype=torch.float64)
    assert ours.shape == truth.shape, f"{what}: shape {tuple(ours.shape)} != {tuple(truth.shape)}"
    ours = ours.detach().double()
    inf = torch.isinf(truth)
    assert torch.equal(torch.isinf(ours), inf), f"{what}: -inf (rows that see nothing) differ"
    assert torch.equal(ours[inf], truth[inf]), f"{what}: -inf differs"
    return (ours[~inf] - truth[~inf]).abs().max().item() if (~inf).any() else 0.0


def assert_close(ours, truth, names, what: str) -> None:
    assert len(ours) == len(truth), f"{what}: {len(ours)} results, expected {len(truth)}"
    for name, mine, want in zip(names, ours, truth):
        d = gap(mine, want, f"{what} {name}")
        assert d <= TOL, f"{what} {name}: differs from the ground truth by {d:.3g}"


def forward_both(q, k, v, variant, bm, sinks, kernel, enable_gqa=True, scale=None):
    """(ground truth, torch backend) forward results, output and lse."""
    truth = scratch.flex_attention(
        q, k, v, variant.score_mod, bm, scale, enable_gqa, True, sinks=sinks
    )
    ours = flex_attention(
        q, k, v, variant.score_mod, bm, scale, enable_gqa, True, sinks=sinks, kernel=kernel
    )
    return truth, ours


RUNS = [(name, None) for name in CASES] + [(name, SINKS) for name in COMBINED]
IDS = [f"{n}{'+sinks' * bool(s)}" for n, s in RUNS]


@pytest.mark.parametrize("kernel", ["flex-eager", "explicit"])
@pytest.mark.parametrize(("name", "sinks"), RUNS, ids=IDS)
def test_every_variant_forward_matches_the_ground_truth(name, sinks, kernel):
    """GQA (4 query heads on 2 kv heads), L = 5 != S = 7, two batch entries; float64."""
    B, H, _, L, S, _, _ = SIZES
    q, k, v, _ = problem(1, *SIZES)
    variant = CASES[name](B, H, L, S).variant
    truth, ours = forward_both(q, k, v, variant, block_mask(variant, B, H, L, S), sinks, kernel)
    assert ours[0].dtype == torch.float64 and ours[0].device.type == "cpu"
    assert_close(ours, truth, ("output", "lse"), f"{name} {kernel}")


@pytest.mark.parametrize(("name", "sinks"), RUNS, ids=IDS)
def test_every_variant_backward_matches_the_ground_truth(name, sinks):
    B, H, _, L, S, _, _ = SIZES
    q, k, v, d_out = problem(4, *SIZES)
    variant = CASES[name](B, H, L, S).variant
    bm = block_mask(variant, B, H, L, S)
    truth = scratch.flex_attention_backward(
        q, k, v, d_out, variant.score_mod, bm, enable_gqa=True, sinks=sinks
    )
    ours = flex_attention_backward(
        q, k, v, d_out, variant.score_mod, bm, enable_gqa=True, sinks=sinks
    )
    assert_close(ours, truth, GRADS, name)


@random_problems
def test_hypothesis_forward_and_backward(name, z, with_sinks, seed):
    """Shapes (L > S too), GQA, sinks and block sizes drawn; the default kernel (eager here)."""
    B, H, L, S = z.B, z.H, z.L, z.S
    q, k, v, d_out = problem(seed, B, H, z.Hkv, L, S, z.E, z.Ev)
    sinks = [0.3 * h - 0.5 for h in range(H)] if with_sinks else None
    variant = CASES[name](B, H, L, S).variant
    bm = block_mask(variant, B, H, L, S, 1 + seed % 3)
    gqa, what = z.group > 1, f"{name} {z}"
    truth, ours = forward_both(q, k, v, variant, bm, sinks, None, gqa)
    assert_close(ours, truth, ("output", "lse"), what)
    truth = scratch.flex_attention_backward(
        q, k, v, d_out, variant.score_mod, bm, enable_gqa=gqa, sinks=sinks
    )
    ours = flex_attention_backward(
        q, k, v, d_out, variant.score_mod, bm, enable_gqa=gqa, sinks=sinks
    )
    assert_close(ours, truth, GRADS, what)


def test_block_masks_made_for_one_batch_entry_or_head_broadcast():
    """create_block_mask with B or H None (1): the mask is still asked for each (b, h)."""
    B, H, _, L, S, _, _ = SIZES
    q, k, v, _ = problem(2, *SIZES)
    for name, b_mask, h_mask in (("window + softcap", None, None), ("given bool mask", None, H)):
        variant = CASES[name](B, H, L, S).variant
        bm = scratch.create_block_mask(variant.mask_mod, b_mask, h_mask, L, S, BLOCK_SIZE=3)
        for kernel in ("flex-eager", "explicit"):
            truth, ours = forward_both(q, k, v, variant, bm, SINKS, kernel)
            assert_close(ours, truth, ("output", "lse"), f"{name} broadcast {kernel}")


@pytest.mark.parametrize("kernel", ["flex-eager", "explicit"])
def test_rows_that_see_nothing_give_zero_and_minus_inf_or_the_sink(kernel):
    """Causal bottom-right, L = 5 > S = 3: the first two queries see no key."""
    q, k, v, d_out = problem(3, 1, 1, 1, 5, 3, 2, 2)
    variant = CASES["causal bottom-right"](1, 1, 5, 3).variant
    bm = block_mask(variant, 1, 1, 5, 3)
    out, lse = flex_attention(q, k, v, block_mask=bm, return_lse=True, kernel=kernel)
    assert torch.equal(out[0, 0, :2], torch.zeros(2, 2, dtype=torch.float64))
    assert lse[0, 0, :2].tolist() == [float("-inf")] * 2
    out, lse = flex_attention(q, k, v, block_mask=bm, return_lse=True, sinks=[0.75], kernel=kernel)
    assert torch.equal(out[0, 0, :2], torch.zeros(2, 2, dtype=torch.float64))
    assert lse[0, 0, :2].tolist() == [0.75, 0.75]
    truth = scratch.flex_attention_backward(q, k, v, d_out, block_mask=bm, sinks=[0.75])
    ours = flex_attention_backward(q, k, v, d_out, block_mask=bm, sinks=[0.75])
    assert_close(ours, truth, GRADS, "L > S, sink")
    assert torch.equal(ours[0][0, 0, :2], torch.zeros(2, 2, dtype=torch.float64))


def test_a_users_own_torch_mods_and_torch_block_masks():
    """Plain functions written with torch operations (the tests' torch forms) are called as
    FlexAttention calls them, in a scratch BlockMask or in torch's own BlockMask."""
    from torch.nn.attention.flex_attention import create_block_mask

    B, H, _, L, S, _, _ = SIZES
    q, k, v, d_out = problem(5, *SIZES)
    case = COMBINED["sink tokens + softcap + bias"](B, H, L, S)
    truth = scratch.flex_attention(
        q, k, v, case.variant.score_mod, block_mask(case.variant, B, H, L, S), None, True, True
    )
    theirs = create_block_mask(case.mask_mod, B, H, L, S, device="cpu")
    # the torch form asked with ints too: scratch's create_block_mask takes the same function
    ours_bm = scratch.create_block_mask(case.mask_mod, B, H, L, S, BLOCK_SIZE=2)
    for bm in (theirs, ours_bm):
        for kernel in ("flex-eager", "explicit"):
            ours = flex_attention(q, k, v, case.score_mod, bm, None, True, True, kernel=kernel)
            assert_close(ours, truth, ("output", "lse"), f"user mods, {type(bm)} {kernel}")
    grads = scratch.flex_attention_backward(
        q, k, v, d_out, case.variant.score_mod, block_mask(case.variant, B, H, L, S), None, True
    )
    ours = flex_attention_backward(q, k, v, d_out, case.score_mod, theirs, None, True)
    assert_close(ours, grads, GRADS, "user mods backward")


def test_torchs_tiles_from_the_array_forms_are_the_ground_truths_tiles():
    """torch's create_block_mask on a variant's array form lists the tiles (and full tiles) that
    scratch.create_block_mask lists from the plain mask_mod."""
    B, H, _, L, S, _, _ = SIZES
    q, k, v, _ = problem(6, *SIZES)
    for name in CASES:
        variant = CASES[name](B, H, L, S).variant
        if variant.mask_mod is None:
            continue
        ours = block_mask(variant, B, H, L, S, 2)
        call = prepare(q, k, v, FlexOptions(variant.score_mod, ours, enable_gqa=True), "cpu", None)
        theirs = call.torch_block_mask()  # (B, H, L / 2, S / 2) tiles, and the full ones
        partial = theirs.to_dense()
        for b in range(B):
            for h in range(H):
                for qb, tiles in enumerate(ours.kv_blocks[b][h]):
                    listed = {kb for kb, _ in tiles}
                    seen = {int(kb) for kb in partial[b, h, qb].nonzero().flatten()}
                    assert seen == listed, f"{name} (b, h, query block) {(b, h, qb)}"
                    # full tiles: torch pads L and S to whole tiles (padding counts as masked),
                    # so a tile the padding cuts is partial there; whole tiles agree
                    whole = {kb for kb, f in tiles if f and 2 * kb + 2 <= S and 2 * qb + 2 <= L}
                    full_theirs = set(_full_tiles(theirs, b, h, qb))
                    assert whole <= full_theirs <= {kb for kb, f in tiles if f}, f"{name} {qb}"


def _full_tiles(bm, b: int, h: int, qb: int) -> list[int]:
    """The full key tiles torch lists for one query tile."""
    n = int(bm.full_kv_num_blocks[b, h, qb])
    return [int(i) for i in bm.full_kv_indices[b, h, qb, :n]]


@pytest.mark.parametrize("name", list(COMBINED))
@pytest.mark.parametrize("kernel", ["flex-eager", "explicit"])
def test_float32_within_twice_the_plain_float32_error(name, kernel):
    """Output and gradients in float32 against the ground truth on the same (rounded) inputs."""
    B, H, _, L, S, _, _ = SIZES
    rounded = [torch.tensor(x, dtype=torch.float32) for x in problem(7, *SIZES)]
    q, k, v, d_out = (t.double().tolist() for t in rounded)
    case = CASES[name](B, H, L, S)
    variant, bm = case.variant, block_mask(case.variant, B, H, L, S)
    truth = scratch.flex_attention(q, k, v, variant.score_mod, bm, None, True, sinks=SINKS)
    out = flex_attention(
        *rounded[:3], variant.score_mod, bm, None, True, sinks=SINKS, kernel=kernel
    )
    assert out.dtype == torch.float32
    plain, leaves = explicit_forward(case, q, k, v, SINKS, dtype=torch.float32)
    rule = reference_error_rule(out.tolist(), plain.tolist(), truth, dtype="float32")
    assert rule.ok, f"{name} {kernel}: output {rule}"
    grads = scratch.flex_attention_backward(
        q, k, v, d_out, variant.score_mod, bm, None, True, sinks=SINKS
    )
    ours = flex_attention_backward(*rounded, variant.score_mod, bm, None, True, sinks=SINKS)
    plain = torch.autograd.grad(plain, leaves, rounded[3])
    for what, mine, ref, want in zip(GRADS, ours, plain, grads):
        assert mine.dtype == torch.float32
        rule = reference_error_rule(mine.tolist(), ref.tolist(), want, dtype="float32")
        assert rule.ok, f"{name} {what}: {rule}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kernel", ["flex-eager", "explicit"])
def test_16_bit_storage_with_float32_math(dtype, kernel):
    """Output in the 16-bit dtype, lse in float32; within the rule against the plain 16-bit form."""
    B, H, _, L, S, _, _ = SIZES
    rounded = [torch.tensor(x, dtype=dtype) for x in problem(14, *SIZES)[:3]]
    q, k, v = (t.double().tolist() for t in rounded)
    case = COMBINED["window + softcap"](B, H, L, S)
    variant, bm = case.variant, block_mask(case.variant, B, H, L, S)
    truth = scratch.flex_attention(q, k, v, variant.score_mod, bm, None, True, True, sinks=SINKS)
    out, lse = flex_attention(
        *rounded, variant.score_mod, bm, None, True, True, sinks=SINKS, kernel=kernel
    )
    assert (out.dtype, lse.dtype) == (dtype, torch.float32)
    plain, _ = explicit_forward(case, q, k, v, SINKS, dtype=dtype)
    name = str(dtype).removeprefix("torch.")
    rule = reference_error_rule(out.tolist(), plain.tolist(), truth[0], dtype=name)
    assert rule.ok, f"{name} {kernel}: {rule}"


def test_kernel_choice_here_and_refusals():
    q, k, v, _ = problem(8, *SIZES)
    case = COMBINED["window + softcap"](*SIZES[:2], *SIZES[3:5])
    bm = block_mask(case.variant, *SIZES[:2], *SIZES[3:5])
    call = prepare(
        q, k, v, FlexOptions(case.variant.score_mod, bm, enable_gqa=True, sinks=SINKS), "cpu", None
    )
    assert choose_kernel(call, None, lse=True, grad=False) == "flex-eager"  # float64
    assert choose_kernel(call, None, lse=True, grad=True) == "explicit"  # no CPU backward
    with pytest.raises(ValueError, match="does not support backward on CPU"):
        choose_kernel(call, "flex-eager", lse=True, grad=True)
    with pytest.raises(ValueError, match="not float64"):
        choose_kernel(call, "flex-compiled", lse=False, grad=False)
    with pytest.raises(ValueError, match="kernel: expected None or one of"):
        choose_kernel(call, "fused", lse=False, grad=False)


def test_inputs_that_need_a_gradient_get_it_through_the_forward():
    """On CPU the forward takes the explicit path then; autograd's gradients are the truth's."""
    B, H, _, L, S, _, _ = SIZES
    q, k, v, d_out = problem(9, *SIZES)
    variant = COMBINED["window + softcap"](B, H, L, S).variant
    bm = block_mask(variant, B, H, L, S)
    leaves = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v, SINKS)]
    out = flex_attention(*leaves[:3], variant.score_mod, bm, None, True, sinks=leaves[3])
    ours = torch.autograd.grad(out, leaves, torch.tensor(d_out, dtype=torch.float64))
    truth = scratch.flex_attention_backward(
        q, k, v, d_out, variant.score_mod, bm, None, True, sinks=SINKS
    )
    assert_close(ours, truth, GRADS, "autograd through the forward")


def test_bad_inputs_are_refused_with_the_ground_truths_words():
    q, k, v, d_out = problem(10, *SIZES)
    for call in (scratch.flex_attention, flex_attention):
        with pytest.raises(ValueError, match="needs enable_gqa=True"):
            call(q, k, v)
        with pytest.raises(ValueError, match="sinks: expected one logit per query head"):
            call(q, k, v, enable_gqa=True, sinks=[0.0])
    with pytest.raises(ValueError, match="grad_output: expected the output's shape"):
        flex_attention_backward(q, k, v, q, enable_gqa=True)
    other = scratch.create_block_mask(
        CASES["causal top-left"](1, 1, 3, 3).variant.mask_mod, 1, 1, 3, 3
    )
    with pytest.raises(ValueError, match="block_mask: made for shape"):
        flex_attention(q, k, v, block_mask=other, enable_gqa=True)


def test_registered_on_the_torch_cpu_backend():
    backend = backends.get("torch-cpu")
    q, k, v, d_out = problem(11, *SIZES)
    out = backend.flex_attention(q, k, v, enable_gqa=True)
    assert_close((out,), (scratch.flex_attention(q, k, v, enable_gqa=True),), ("output",), "cpu")
    grads = backend.flex_attention_backward(q, k, v, d_out, enable_gqa=True)
    truth = scratch.flex_attention_backward(q, k, v, d_out, enable_gqa=True)
    assert_close(grads, truth, GRADS, "cpu backward")


def test_compiled_flexattention_in_float32_where_this_machine_compiles():
    """The default kernel for float32 without lse: compiled (probed once; ~40 s here with g++)."""
    problem_here = compile_problem(torch.device("cpu"), torch.float32, lse=False, grad=False)
    if problem_here is not None:
        pytest.skip(f"FlexAttention does not compile here: {problem_here}")
    B, H, _, L, S, _, _ = SIZES
    rounded = [torch.tensor(x, dtype=torch.float32) for x in problem(12, *SIZES)[:3]]
    q, k, v = (t.double().tolist() for t in rounded)
    case = COMBINED["window + softcap"](B, H, L, S)
    variant, bm = case.variant, block_mask(case.variant, B, H, L, S)
    call = prepare(*rounded, FlexOptions(variant.score_mod, bm, enable_gqa=True), "cpu", None)
    assert choose_kernel(call, None, lse=False, grad=False) == "flex-compiled"
    out = flex_attention(*rounded, variant.score_mod, bm, None, True)
    truth = scratch.flex_attention(q, k, v, variant.score_mod, bm, None, True)
    plain, _ = explicit_forward(case, q, k, v, dtype=torch.float32)
    rule = reference_error_rule(out.tolist(), plain.tolist(), truth, dtype="float32")
    assert rule.ok, f"compiled: {rule}"


needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU (torch.cuda.is_available() is False)"
)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("name", ["window + softcap", "documents + causal"])
def test_cuda_forward_and_backward_through_flexattention(name):
    """On a GPU: FlexAttention forward (float64 eager: tight; float32 compiled: the rule) and its
    backward through FlexAttention itself (no sinks) against the ground truth."""
    B, H, _, L, S, _, _ = SIZES
    q, k, v, d_out = problem(13, *SIZES)
    case = CASES[name](B, H, L, S)
    variant, bm = case.variant, block_mask(case.variant, B, H, L, S)
    truth = scratch.flex_attention(q, k, v, variant.score_mod, bm, None, True, True, sinks=SINKS)
    ours = flex_attention(
        q, k, v, variant.score_mod, bm, None, True, True, sinks=SINKS, device="cuda"
    )
    assert ours[0].device.type == "cuda"
    assert_close([t.cpu() for t in ours], truth, ("output", "lse"), f"cuda {name}")
    grads = scratch.flex_attention_backward(q, k, v, d_out, variant.score_mod, bm, None, True)
    call = prepare(q, k, v, FlexOptions(variant.score_mod, bm, enable_gqa=True), "cuda", None)
    assert choose_kernel(call, None, lse=False, grad=True) == "flex-eager"  # float64: eager
    ours = flex_attention_backward(q, k, v, d_out, variant.score_mod, bm, None, True, device="cuda")
    assert_close([t.cpu() for t in ours], grads, GRADS, f"cuda backward {name}")
    rounded = [torch.tensor(x, dtype=torch.float32) for x in (q, k, v)]
    q32 = [t.double().tolist() for t in rounded]
    truth = scratch.flex_attention(*q32, variant.score_mod, bm, None, True)
    out = flex_attention(*rounded, variant.score_mod, bm, None, True, device="cuda")
    plain, _ = explicit_forward(case, *q32, dtype=torch.float32)
    rule = reference_error_rule(out.cpu().tolist(), plain.tolist(), truth, dtype="float32")
    assert rule.ok, f"cuda float32 {name}: {rule}"
