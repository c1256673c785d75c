"""Qwen2 (the second decoder family) from a GGUF file written here with gguf's writer: random
small weights with q, k, v biases, q, k rows as llama.cpp stores Qwen2's (not permuted) and an
untied output head, equal to transformers' Qwen2 in float64 (tests/llama_reference.py widens
its float32 steps), and usable wherever a Llama is: run, trace, block, generate, the CLI.

Tolerance: both sides compute the same float64 sums of float32 weights widened exactly, in
other orders; a tiny model's values are sums of at most 24 products of size ~1 over two layers:
differences of a few hundred ulps at most (found: 9.3e-15 on the weights, 2.3e-14 on logits of
size ~6, seeds 0-4). AGREE = 1e-12 leaves ~50 times that, and dropping the q bias moves the
weights by ~1 (seen)."""

import contextlib
import io

import pytest

np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from scratch import models  # noqa: E402
from scratch.models.__main__ import main  # noqa: E402
from scratch.models.block import block  # noqa: E402
from tests.test_models_gguf import MERGES, TOKENS, write  # noqa: E402

AGREE = 1e-12
LAYERS, D, HEADS, KV, INNER = 2, 16, 4, 2, 24  # head size 4, groups of 2
TEXT = "ab ab ab"


def metadata() -> dict:
    """A tiny Qwen2's metadata as llama.cpp's converter spells it (qwen2.* keys)."""
    return {
        "qwen2.block_count": LAYERS,
        "qwen2.context_length": 16,
        "qwen2.embedding_length": D,
        "qwen2.feed_forward_length": INNER,
        "qwen2.attention.head_count": HEADS,
        "qwen2.attention.head_count_kv": KV,
        "qwen2.rope.freq_base": 1000.0,
        "qwen2.attention.layer_norm_rms_epsilon": 1e-6,
        "general.quantization_version": 2,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.tokens": TOKENS,
        "tokenizer.ggml.merges": MERGES,
        "tokenizer.ggml.token_type": [3, 1, 1, 1, 1, 1],
    }


def weights(seed: int) -> dict:
    """Random float32 tensors of the tiny Qwen2: biases on q, k, v, an output head of its own."""
    rng = np.random.default_rng(seed)
    r = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.5  # noqa: E731
    width = KV * D // HEADS
    w = {"token_embd.weight": r(len(TOKENS), D), "output_norm.weight": 1 + r(D),
         "output.weight": r(len(TOKENS), D)}  # fmt: skip
    for n in range(LAYERS):
        p = f"blk.{n}."
        w[p + "attn_norm.weight"], w[p + "ffn_norm.weight"] = 1 + r(D), 1 + r(D)
        w[p + "attn_q.weight"], w[p + "attn_q.bias"] = r(D, D), r(D)
        w[p + "attn_k.weight"], w[p + "attn_k.bias"] = r(width, D), r(width)
        w[p + "attn_v.weight"], w[p + "attn_v.bias"] = r(width, D), r(width)
        w[p + "attn_output.weight"] = r(D, D)
        w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"] = r(INNER, D), r(INNER, D)
        w[p + "ffn_down.weight"] = r(D, INNER)
    return w


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Three tiny Qwen2 files, one per seed."""
    root = tmp_path_factory.mktemp("qwen2")
    return [write(root / f"qwen2-{s}.gguf", metadata(), weights(s), arch="qwen2") for s in range(3)]


@pytest.mark.parametrize("seed", range(3))
def test_a_tiny_qwen2_is_transformers_qwen2_in_float64(files, seed):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.llama_reference import reference

    model = models.load(files[seed])
    assert model.family == "qwen2" and model.decoder
    run = model.run(TEXT)
    assert run.ids == [4, 5, 5]
    with torch.no_grad():
        out = reference(files[seed])(torch.tensor([run.ids]), output_attentions=True)
    attentions = np.stack([a[0].numpy() for a in out.attentions])  # (layers, heads, T, T)
    assert attentions.shape == run.attentions.shape
    assert np.abs(attentions - run.attentions).max() <= AGREE
    assert np.abs(out.logits[0].numpy() - run.logits).max() <= AGREE


def test_tokens_are_transformers_tokens(files):
    pytest.importorskip("transformers")
    from tests.llama_reference import tokenizer

    model, theirs = models.load(files[0]), tokenizer(files[0])
    for text in (TEXT, "ab  ab", " a b", "abab ab\n ab"):
        assert model.tokenize(text)[1] == theirs(text)["input_ids"], text


def test_greedy_generation_is_transformers(files):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.llama_reference import reference

    model = models.load(files[1])
    made = model.generate(TEXT, 6)
    with torch.no_grad():
        out = reference(files[1]).generate(
            torch.tensor([made.prompt.ids]), max_new_tokens=6, do_sample=False, eos_token_id=None
        )
    assert made.ids == out[0, 3:].tolist()


def test_a_qwen2_head_traces_blocks_and_prints_as_a_llama_does(files):
    model = models.load(files[2])
    run = model.run(TEXT)
    assert model.family_record.kv_heads(model.config) == [0, 0, 1, 1]
    for layer, head in ((0, 0), (1, 3)):  # the ground truth adds the biases before RoPE
        weights = np.asarray(run.trace(layer, head)["weights"].value)  # raises past 1e-9
        assert np.abs(weights - run.attentions[layer, head]).max() <= 1e-12
    b = block(run, 1)
    assert np.abs(b["attention"].value - run.attentions[1]).max() <= 1e-12
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([str(files[2]), TEXT, "-k", "2", "--generate", "3"]) == 0
    assert "3 new tokens" in out.getvalue()


@pytest.mark.parametrize(
    ("drop", "message"),
    [("output.weight", "tensor output.weight is missing"),
     ("blk.1.attn_q.bias", "tensor blk.1.attn_q.bias is missing")],
)  # fmt: skip
def test_a_qwen2_without_its_head_or_a_bias_is_refused(tmp_path, drop, message):
    tensors = {name: w for name, w in weights(0).items() if name != drop}
    path = write(tmp_path / "bad.gguf", metadata(), tensors, arch="qwen2")
    with pytest.raises(models.ModelError, match=message):
        models.load(path)
