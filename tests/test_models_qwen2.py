"""Qwen2 (the second decoder family) from a GGUF file written here with gguf's writer: random
small weights with q, k, v biases, q, k rows as llama.cpp stores Qwen2's (not permuted) and an
output head of its own or none (tied: the token table, as Qwen2-0.5B's), equal to transformers'
Qwen2 in float64 (tests/llama_reference.py widens its float32 steps), and usable wherever a Llama
is: run, trace, block, generate, the CLI.

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

from gui.present import block_view_model  # noqa: E402
from scratch import models  # noqa: E402
from scratch.models import layer_block  # noqa: E402
from scratch.models.__main__ import main  # noqa: E402
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


def weights(seed: int, tied: bool = False) -> dict:
    """Random float32 tensors of the tiny Qwen2: biases on q, k, v, an output head of its own
    (tied: none, as Qwen2-0.5B's file: the head is the token table)."""
    rng = np.random.default_rng(seed)
    r = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.5  # noqa: E731
    width = KV * D // HEADS
    w = {"token_embd.weight": r(len(TOKENS), D), "output_norm.weight": 1 + r(D),
         "output.weight": r(len(TOKENS), D)}  # fmt: skip
    if tied:
        del w["output.weight"]
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


@pytest.fixture(scope="module")
def tied_files(tmp_path_factory):
    """Three tiny Qwen2 files without output.weight (a tied head), one per seed."""
    root = tmp_path_factory.mktemp("qwen2-tied")
    return [
        write(root / f"tied-{s}.gguf", metadata(), weights(s, tied=True), arch="qwen2")
        for s in range(3)
    ]


@pytest.mark.parametrize(("seed", "tied"), [(s, t) for t in (False, True) for s in range(3)])
def test_a_tiny_qwen2_is_transformers_qwen2_in_float64(files, tied_files, seed, tied):
    """Untied, and tied (no output.weight: the reference sets tie_word_embeddings=True)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.llama_reference import reference

    path = (tied_files if tied else files)[seed]
    model = models.load(path)
    assert model.config.tied is tied
    assert model.family == "qwen2" and model.decoder
    run = model.run(TEXT)
    assert run.ids == [4, 5, 5]
    with torch.no_grad():
        theirs = reference(path)
        out = theirs(torch.tensor([run.ids]), output_attentions=True)
    assert theirs.config.tie_word_embeddings is tied  # the reference's head: the token table
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
    b = layer_block(run, 1)
    assert np.abs(b["attention"].value - run.attentions[1]).max() <= 1e-12
    assert (b.family, b.layout) == ("qwen2", "llama")  # its name; its record's layout
    assert b["output"].words.startswith("next-token logits (T, 6): the 6 likeliest")  # vocab 6
    titles = [x.title for x in block_view_model.boxes(b, 0)]  # words by layout, not by name
    assert [titles[i] for i in (2, 7, 10)] == ["RMSNorm", "MLP (SwiGLU)", "Next-token logits"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([str(files[2]), TEXT, "-k", "2", "--generate", "3"]) == 0
    assert "3 new tokens" in out.getvalue()


@pytest.mark.parametrize("seed", range(3))
def test_the_windows_qwen2_head_is_the_models_head_biases_included(files, seed):
    """gui.state.model_session: x gets a column of ones and W_q, W_k, W_v a row of b_q, b_k, b_v, so
    the window's q, k (after RoPE), scores and weights are the model's own (no Qt). Found: at
    most 7.1e-15 (scores), seeds 0-5, every head; dropping b_q moves the weights by 0.05-0.3."""
    from gui.state import controller
    from gui.state.head_note import model_head_note
    from gui.state.model_session import head_session

    run = models.load(files[seed]).run(TEXT)
    for layer, head in ((0, 1), (1, 2), (1, 3)):
        s = head_session(run, layer, head)
        assert all(row[-1] == 1.0 for row in s.query) and len(s.w_q) == D + 1  # the bias row
        note = model_head_note(s)
        assert f"d_model {D} + 1: X is the layer's RMSNorm'd input" in note and "b_q" in note
        trace = controller.run(s).trace
        gap = np.abs(np.asarray(trace["weights"].value) - run.attentions[layer, head]).max()
        assert gap <= AGREE, f"layer {layer} head {head}: weights {gap:.3g} from the run's"
        truth = run.trace(layer, head)  # the ground truth: biases added, then RoPE
        for name, step in (("q", "q_rotated"), ("k", "k_rotated"), ("scores", "scores")):
            gap = np.abs(np.asarray(trace[step].value) - np.asarray(truth[name].value)).max()
            assert gap <= AGREE, f"layer {layer} head {head} {step}: {gap:.3g}"


def test_a_qwen2_without_a_bias_is_refused(tmp_path):
    tensors = {name: w for name, w in weights(0).items() if name != "blk.1.attn_q.bias"}
    path = write(tmp_path / "bad.gguf", metadata(), tensors, arch="qwen2")
    with pytest.raises(models.ModelError, match="tensor blk.1.attn_q.bias is missing"):
        models.load(path)


def test_the_family_record_says_whether_the_head_may_be_tied(tmp_path, monkeypatch):
    """A family whose record forbids a tied head refuses a file without output.weight."""
    from dataclasses import replace

    from scratch.models import family

    path = write(tmp_path / "tied.gguf", metadata(), weights(0, tied=True), arch="qwen2")
    qwen2 = replace(family.FAMILIES["qwen2"], tied_head=False)
    monkeypatch.setitem(family.FAMILIES, "qwen2", qwen2)
    with pytest.raises(models.ModelError, match="tensor output.weight is missing"):
        models.load(path)


def test_the_cli_help_names_every_decoder_family(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "decoder family (llama, qwen2)" in " ".join(capsys.readouterr().out.split())
