"""check_variants checks the lse a kernel reports beside its output, in either base.

FlashAttention's interface returns (out, softmax_lse, S_dmask), softmax_lse (batch, nheads,
seqlen_q) or (nheads, total_q) packed; a FlexAttention-style kernel (out, lse (B, H, L)). Both
natural logs; a Triton kernel keeps base 2 (lse_base=2). The kernels are tests/flash_attn_kernels.py
(FlashAttention-2's loop in NumPy, its varlen loop) and tests/outside_kernels_b.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from scratch.checker import check_variants
from scratch.checker.cli import main
from scratch.checker.variant_lse import EMPTY_ROW, NO_MAX, OTHER_BASE
from tests.flash_attn_kernels import LSE_BUGS, make_tiled, make_varlen
from tests.outside_kernels_b import flash_decoding, flex_tiles, kernel

NAMES = {"lse-base-2": OTHER_BASE["e"], "lse-zero-empty": EMPTY_ROW, "lse-no-max": NO_MAX}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("base", ["e", "2"])
@pytest.mark.parametrize("packed", [False, True], ids=["flash_attn", "varlen"])
def test_a_correct_lse_passes_in_the_base_declared(dtype, base, packed):
    kernel = make_tiled(lse=base)
    kernel = make_varlen(kernel) if packed else kernel
    for seed in range(3):
        report = check_variants(kernel, dtype=dtype, seed=seed, lse_base=2 if base == "2" else "e")
        assert report, str(report)
        passed = {c.name for c in report.cases if c.status == "pass"}
        assert "causal-more-queries" in passed  # rows with no key: lse infinite, output 0


@pytest.mark.parametrize("bug", LSE_BUGS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_wrong_lse_fails_beside_a_right_output_and_is_named(bug, dtype):
    for seed in range(3):
        report = check_variants(make_tiled(bug, lse="e"), dtype=dtype, seed=seed)
        assert not report
        for case in report.failed:
            assert case.message.startswith("lse: max error"), case.message  # the output passed
            assert case.diagnosis == NAMES[bug], (case.name, case.diagnosis)


def test_the_other_base_is_named_both_ways():
    natural = check_variants(make_tiled(lse="e"), dtype="float64", lse_base=2)
    assert not natural and {c.diagnosis for c in natural.failed} == {OTHER_BASE["2"]}
    assert "lse_base=2" in natural.settings
    base_2 = check_variants(make_tiled(lse="2"), dtype="float64")
    assert not base_2 and {c.diagnosis for c in base_2.failed} == {OTHER_BASE["e"]}


def test_an_lse_of_the_wrong_shape_fails_with_the_shape_expected():
    tiled = make_tiled(lse="e")

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1)):
        out, lse, _ = tiled(q, k, v, softmax_scale=softmax_scale, causal=causal,
                            window_size=window_size)  # fmt: skip
        return out, lse.transpose(0, 2, 1), None  # (batch, seqlen_q, nheads)

    report = check_variants(flash_attn_func, dtype="float64")
    square = {"softmax-scale"}  # (1, 16, 2) is not (1, 2, 16): every case's shape is refused
    assert not report and square <= {c.name for c in report.failed}
    assert all("expected (1, 2, 16) (batch, nheads, seqlen_q)" in c.message
               for c in report.failed if c.name in square)  # fmt: skip


def test_a_flex_style_kernel_reports_its_lse_weights_are_not_read_as_one():
    def with_lse(q, k, v, score_mod=None, mask_mod=None, enable_gqa=False):
        out, lse = flash_decoding_style(q, k, v, score_mod, mask_mod)
        return out, lse  # (1, H, L, Ev), (1, H, L)

    def with_weights(q, k, v, score_mod=None, mask_mod=None, enable_gqa=False):
        out, lse = flash_decoding_style(q, k, v, score_mod, mask_mod)
        return out, np.zeros(out.shape[:3] + (k.shape[2],))  # (1, H, L, S): not an lse

    assert check_variants(with_lse, dtype="float64")
    assert check_variants(with_weights, dtype="float64")

    def lse_in_base_2(*args, **kwargs):
        out, lse = with_lse(*args, **kwargs)
        return out, lse / np.log(2.0)

    lse_in_base_2.__signature__ = __import__("inspect").signature(with_lse)
    report = check_variants(lse_in_base_2, dtype="float64")
    assert not report and {c.diagnosis for c in report.failed} == {OTHER_BASE["e"]}


def flash_decoding_style(q, k, v, score_mod, mask_mod):
    """flex_tiles' output and its lse from one softmax of the same rule (float64)."""
    out = flex_tiles(q, k, v, score_mod=score_mod, mask_mod=mask_mod)
    _, H, L, E = q.shape
    S = k.shape[2]
    k = np.repeat(k, H // k.shape[1], axis=1)
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(E)  # (1, H, L, S)
    for h, i, j in np.ndindex(H, L, S):
        if score_mod is not None:
            s[0, h, i, j] = score_mod(float(s[0, h, i, j]), 0, h, i, j)
        if mask_mod is not None and not mask_mod(0, h, i, j):
            s[0, h, i, j] = -np.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        top = s.max(-1)
        lse = np.where(np.isfinite(top), top + np.log(np.exp(s - top[..., None]).sum(-1)), top)
    return out, lse


def test_the_split_kv_kernel_reports_its_merged_lse():
    for dtype in ("float32", "float64"):
        fn = kernel(flash_decoding, "flash_decoding", lse=True)
        report = check_variants(fn, dtype=dtype, seed=4)
        assert report, str(report)


def test_bad_lse_bases_are_refused_by_name():
    with pytest.raises(ValueError, match="lse_base: expected 'e' .* or 2 .*, found 10"):
        check_variants(make_tiled(lse="e"), lse_base=10)
    with pytest.raises(ValueError, match="lse_base: expected"):
        check_variants(make_tiled(lse="e"), lse_base=True)
    assert main(["tests.flash_attn_kernels:make_tiled", "--lse-base", "2"]) == 2  # no --variants


def test_the_command_line_checks_a_base_2_lse(tmp_path, monkeypatch, capsys):
    (tmp_path / "base2_kernel.py").write_text(
        "from tests.flash_attn_kernels import make_tiled\nflash_attn_func = make_tiled(lse='2')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["--variants", "base2_kernel:flash_attn_func", "--lse-base", "2"]) == 0
    assert main(["--variants", "base2_kernel:flash_attn_func"]) == 1
    assert OTHER_BASE["e"][:40] in capsys.readouterr().out


def test_a_prefix_longer_than_a_tile_tells_a_causal_tile_skip_apart():
    """flex_tiles skipping tiles past the diagonal as a causal kernel does: prefix 5 sits inside
    the first tile (passes), prefix 67 reaches past a 16- or 64-key tile (fails, named)."""
    for bk in (16, 64):
        skipping = kernel(flex_tiles, "flex_tiles", bug="causal-skip", bq=bk, bk=bk)
        report = check_variants(skipping, dtype="float64")
        status = {c.name: c for c in report.cases}
        assert status["prefix-lm"].status == "pass"
        assert status["prefix-tiles"].status == "fail"
        assert "key tiles past the causal diagonal skipped" in status["prefix-tiles"].diagnosis


def test_an_lse_in_nested_lists_is_checked_too():
    """array='list': scratch.flex_attention's own (out, lse) passes on seeds 0-4; the same lse
    in base 2 fails, named."""
    from scratch import create_block_mask, flex_attention

    def plain(q, k, v, score_mod=None, mask_mod=None, sinks=None, enable_gqa=False, base=1.0):
        H, L, S = len(q[0]), len(q[0][0]), len(k[0][0])
        block = None if mask_mod is None else create_block_mask(mask_mod, 1, H, L, S)
        out, lse = flex_attention(q, k, v, score_mod, block, enable_gqa=enable_gqa, sinks=sinks,
                                  return_lse=True)  # fmt: skip
        return out, [[[x * base for x in row] for row in head] for head in lse]

    for seed in range(5):
        report = check_variants(plain, array="list", dtype="float64", seed=seed)
        assert report, str(report)

    def base_2(q, k, v, score_mod=None, mask_mod=None, sinks=None, enable_gqa=False):
        return plain(q, k, v, score_mod, mask_mod, sinks, enable_gqa, base=1 / np.log(2.0))

    report = check_variants(base_2, array="list", dtype="float64")
    assert not report and {c.diagnosis for c in report.failed} == {OTHER_BASE["e"]}
