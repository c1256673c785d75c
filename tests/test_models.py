"""Real models: the NumPy forward agrees with Hugging Face transformers to ~1e-15 in float64."""

import json
import shutil

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

import scratch  # noqa: E402
from scratch import models  # noqa: E402
from tests.model_dirs import AGREE, WORDS, hf_attentions, word_tokenizer  # noqa: E402

TEXT = "Your journey starts with one step"


@pytest.fixture(scope="module")
def minilm():
    try:
        return models.load()
    except models.ModelError as exc:  # the package is installed by make; say so if it is not
        pytest.skip(f"default model not installed: {exc}")


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-gpt2")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=len(WORDS),
        n_positions=16,
        n_embd=12,
        n_layer=2,
        n_head=3,
        attn_implementation="eager",
    )
    model = transformers.GPT2Model(config).double().eval()
    model.save_pretrained(path, safe_serialization=True)
    word_tokenizer(path, special=False)
    return path, model


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(1)
    config = transformers.BertConfig(
        vocab_size=len(WORDS),
        hidden_size=8,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=12,
        attn_implementation="eager",
    )
    model = transformers.BertModel(config, add_pooling_layer=False).double().eval()
    model.save_pretrained(path, safe_serialization=True)
    word_tokenizer(path)
    return path, model


def test_the_default_model_agrees_with_transformers(minilm):
    run = minilm.run(TEXT)
    assert run.tokens == ["[CLS]", "your", "journey", "starts", "with", "one", "step", "[SEP]"]
    assert run.attentions.shape == (6, 12, 8, 8) and run.attentions.dtype == np.float64
    hf = transformers.BertModel.from_pretrained(
        str(minilm.path), attn_implementation="eager", dtype=torch.float64
    ).eval()
    gap = np.abs(hf_attentions(hf, run.ids) - run.attentions).max()
    assert gap <= AGREE, gap


def test_a_traced_head_is_the_ground_truth_of_that_head(minilm):
    run = minilm.run(TEXT)
    trace = run.trace(layer=3, head=7)
    assert isinstance(trace, scratch.Trace)
    assert trace.tokens == tuple(run.tokens) or list(trace.tokens) == run.tokens
    weights = np.asarray(trace["weights"].value)
    assert np.abs(weights - run.attentions[3, 7]).max() <= models.run.AGREEMENT
    assert np.asarray(trace["x"].value).shape == (8, 384)  # the layer's input
    assert np.asarray(trace["q"].value).shape == (8, 32)  # one head's columns
    # and it is that head, not a neighbour
    assert np.abs(weights - run.attentions[3, 6]).max() > 1e-3


def test_the_weights_are_read_once(minilm):
    assert models.load() is minilm and models.load("default") is minilm


def test_attention_sinks_are_found_where_the_weight_piles_up(minilm):
    sinks = minilm.run(TEXT).sinks()
    assert sinks and all(0.0 < share <= 1.0 for share in sinks.values())
    assert any(key.startswith(("[CLS]", "[SEP]")) for key in sinks)


def test_a_tiny_gpt2_directory_agrees_with_transformers(tiny_gpt2):
    path, hf = tiny_gpt2
    model = models.load(path)
    assert model.family == "gpt2" and model.causal
    run = model.run("your journey starts with one step")
    assert run.tokens == ["your", "journey", "starts", "with", "one", "step"]
    gap = np.abs(hf_attentions(hf, run.ids) - run.attentions).max()
    assert gap <= AGREE, gap
    assert np.all(np.triu(run.attentions[0, 0], 1) == 0.0)  # causal heads
    trace = run.trace(1, 2)
    assert np.abs(np.asarray(trace["weights"].value) - run.attentions[1, 2]).max() <= 1e-9


def test_a_tiny_bert_directory_agrees_with_transformers(tiny_bert):
    path, hf = tiny_bert
    run = models.load(path).run("one step")
    assert run.tokens == ["[CLS]", "one", "step", "[SEP]"]
    assert np.abs(hf_attentions(hf, run.ids) - run.attentions).max() <= AGREE


def test_a_planted_mistake_in_the_forward_is_seen(tiny_gpt2, monkeypatch):
    # the agreement above can fail: drop GPT-2's causal mask and it does
    path, hf = tiny_gpt2
    from scratch.models import gpt2, layers

    real = layers.attention_heads
    monkeypatch.setattr(
        gpt2, "attention_heads", lambda q, k, v, h, causal, scale: real(q, k, v, h, False, scale)
    )
    run = models.model.Model.run(models.load(path), "your journey starts")
    assert np.abs(hf_attentions(hf, run.ids) - run.attentions).max() > 1e-3


# --- bad input: one clear message naming the file or the limit ------------------------------


def test_a_directory_without_the_files_is_named(tmp_path):
    with pytest.raises(models.ModelError, match="not found"):
        models.load(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(models.ModelError, match="missing model.safetensors, tokenizer.json"):
        models.load(tmp_path)
    with pytest.raises(models.ModelError, match="config.json: a file, not a directory"):
        models.load(tmp_path / "config.json")  # not "not found": it is there
    for empty in ("", "  "):  # not the current folder
        with pytest.raises(ValueError, match='path: empty; expected "default", "smollm2"'):
            models.load(empty)


def copy_model(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_truncated_and_corrupt_weights_are_named(tiny_gpt2, tmp_path):
    path = copy_model(tiny_gpt2[0], tmp_path / "m")
    weights = path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(models.ModelError, match=r"model.safetensors: not a readable safetensors"):
        models.load(path)
    weights.write_bytes(b"\x00" * 64)
    with pytest.raises(models.ModelError, match=r"model.safetensors: not a readable safetensors"):
        models.load(path)


def test_a_default_model_with_other_bytes_is_refused(minilm, tmp_path, monkeypatch):
    path = copy_model(minilm.path, tmp_path / "model")
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(models.model, "default_dir", lambda: path)
    with pytest.raises(models.ModelError, match="SHA-256 .* is not all-MiniLM-L6-v2's published"):
        models.load()
    assert models.load(path).name == "model"  # the same files as a local directory: no hash


def test_unknown_architecture_and_bad_config_are_named(tiny_gpt2, tmp_path):
    path = copy_model(tiny_gpt2[0], tmp_path / "m")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(config, model_type="mistral")))
    with pytest.raises(models.ModelError, match="model_type 'mistral' is not supported"):
        models.load(path)
    (path / "config.json").write_text("{not json")
    with pytest.raises(models.ModelError, match="config.json: not readable JSON"):
        models.load(path)


def test_empty_and_too_long_texts_are_refused(minilm, tiny_gpt2):
    with pytest.raises(ValueError, match="text: empty"):
        minilm.run("   ")
    with pytest.raises(TypeError, match="text: expected a string"):
        minilm.run(None)
    with pytest.raises(ValueError, match=r"text: 602 tokens, more than all-MiniLM-L6-v2's 512"):
        minilm.run("step " * 600)
    small = models.load(tiny_gpt2[0])
    with pytest.raises(ValueError, match="more than .* 16 positions"):
        small.run("one " * 17)


def test_bad_head_numbers_are_named(minilm):
    run = minilm.run(TEXT)
    with pytest.raises(ValueError, match="layer: expected 0 to 5, found 6"):
        run.trace(6, 0)
    with pytest.raises(TypeError, match="head: expected an int"):
        run.trace(0, "1")


def test_the_bench_times_a_cold_load_and_a_16_token_run(minilm):
    from scratch import bench

    assert len(minilm.run(bench.MODEL_TEXT).tokens) == 16
    line = bench.model_timing(runs=1)
    assert line.startswith(("PASS: ", "FAIL: ")) and "16-token run" in line
    assert models.load() is not minilm  # the timing loaded cold, so the cache was cleared
