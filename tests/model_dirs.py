"""Tiny random-weight model directories built and saved with transformers, for the model tests."""

import json
import shutil

import pytest

# a test module importing this one is skipped, not broken, where these are not installed
np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "your", "journey", "starts", "with", "one", "step"]
TEXT = "your journey starts with one step"
AGREE = 1e-12  # float64 both ways; the differences seen are a few 1e-15

# small shapes of each family; a test overrides what it varies
GPT2 = dict(
    vocab_size=len(WORDS), n_positions=16, n_embd=12, n_layer=3, n_head=3, initializer_range=0.5
)
BERT = dict(
    vocab_size=len(WORDS),
    hidden_size=8,
    num_hidden_layers=3,
    num_attention_heads=2,
    intermediate_size=16,
    max_position_embeddings=12,
    initializer_range=0.5,
)


def hf_attentions(model, ids):
    """(layers, heads, T, T) from transformers in float64 with the eager attention."""
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    return torch.stack(out.attentions)[:, 0].double().numpy()


def word_tokenizer(path, special=True, words=WORDS):
    """A tiny WordLevel tokenizer.json; with [CLS] ... [SEP] around the words for BERT."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()  # drops NUL and zero-width characters
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if special:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
        )
    tok.save(str(path / "tokenizer.json"))


def build(path, family, seed=0, dtype=torch.float64, **overrides):
    """Save a random `family` model ("gpt2" or "bert") to `path`; return it (in `dtype`, eval)."""
    torch.manual_seed(seed)
    if family == "gpt2":
        config = transformers.GPT2Config(**{**GPT2, **overrides}, attn_implementation="eager")
        model = transformers.GPT2Model(config)
    else:
        config = transformers.BertConfig(**{**BERT, **overrides}, attn_implementation="eager")
        model = transformers.BertModel(config, add_pooling_layer=False)
    path.mkdir(parents=True, exist_ok=True)
    model.to(dtype).eval().save_pretrained(path, safe_serialization=True)
    word_tokenizer(path, special=family == "bert")
    return model


def gap(a, b):
    """Largest absolute difference of two arrays of one shape."""
    assert np.shape(a) == np.shape(b), (np.shape(a), np.shape(b))
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def save_both(tmp_path_factory):
    """One tiny model of each family, saved once: {family: (path, transformers model)}."""
    root = tmp_path_factory.mktemp("saved")
    return {family: (root / family, build(root / family, family)) for family in ("gpt2", "bert")}


DELETE = object()  # a change that removes the key from config.json


def edited(saved, folder, family, **changes):
    """A copy of the saved `family` model whose config.json has `changes` (DELETE removes one)."""
    path = folder / family
    shutil.copytree(saved[family][0], path)
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    config = {key: value for key, value in config.items() if value is not DELETE}
    (path / "config.json").write_text(json.dumps(config))
    return path
