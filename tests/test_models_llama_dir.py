"""A Llama-family directory (config.json, model.safetensors, tokenizer.json), written here by
transformers itself from a seeded random model, agrees with it in float64; its config keys are
read or refused by name, and docs/learn/models.md's table says the same as the code."""

import json
import re
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

from scratch import models  # noqa: E402
from scratch.models import llama_dir  # noqa: E402
from tests.llama_reference import llama64_module  # noqa: E402

TOKENS = ["<|endoftext|>", "a", "b", "Ġ", "ab", "Ġab"]
SIZES = {
    "vocab_size": len(TOKENS),
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,  # query heads 0, 1 read key/value head 0; 2, 3 head 1
    "max_position_embeddings": 16,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "rope_parameters": {"rope_type": "default", "rope_theta": 50.0},
}


def write_tokenizer(path: Path) -> None:
    """A byte-level BPE tokenizer.json of TOKENS with one special token."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    vocab = {t: i for i, t in enumerate(TOKENS)}
    tokenizer = Tokenizer(BPE(vocab=vocab, merges=[("a", "b"), ("Ġ", "ab")]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(TOKENS[0], special=True)])
    tokenizer.save(str(path))


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """(directory, transformers' float64 model) of a seeded random tiny Llama."""
    folder = tmp_path_factory.mktemp("llama")
    config = transformers.LlamaConfig(**SIZES, attn_implementation="eager")
    torch.manual_seed(0)
    model = llama64_module().LlamaForCausalLM(config).to(torch.float64).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, dtype=torch.float64) * 0.5 + ("norm" in name))
    model.save_pretrained(folder)
    write_tokenizer(folder / "tokenizer.json")
    return folder, model


def test_a_llama_directory_agrees_with_transformers(llama):
    folder, hf = llama
    run = models.load(folder).run("ab ab ab")
    assert run.ids == [4, 5, 5]
    with torch.no_grad():
        out = hf(torch.tensor([run.ids]), output_attentions=True)
    attentions = np.stack([a[0].numpy() for a in out.attentions])
    assert np.abs(attentions - run.attentions).max() <= 1e-12
    assert np.abs(out.logits[0].numpy() - run.logits).max() <= 1e-12
    for head in range(4):
        run.trace(1, head)
    assert (
        models.load(folder).generate("ab", 2).ids
        == hf.generate(torch.tensor([[4]]), max_new_tokens=2, do_sample=False, eos_token_id=None)[
            0, 1:
        ].tolist()
    )


def copy_with(tmp_path: Path, folder: Path, **changes) -> Path:
    """A copy of the directory whose config.json has these keys changed (None: removed)."""
    out = tmp_path / "changed"
    out.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        (out / name).write_bytes((folder / name).read_bytes())
    raw = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        raw.pop(key, None) if value is None else raw.__setitem__(key, value)
    (out / "config.json").write_text(json.dumps(raw))
    return out


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"attention_bias": True}, "attention_bias True is refused"),
        ({"mlp_bias": True}, "mlp_bias True is refused"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu' is refused"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings False is refused"),
        ({"tie_word_embeddings": None}, "tie_word_embeddings False is refused"),  # the default
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling {"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 50.0}}, "rope_parameters {"),
        ({"head_dim": 8}, "head_dim 8 is refused"),
        ({"num_key_value_heads": 3}, "must be a multiple of num_key_value_heads 3"),
        ({"num_key_value_heads": None}, "k_proj.weight is float64 (32, 64); expected floating"),
        ({"rms_norm_eps": -1}, "rms_norm_eps expected a number > 0"),
        ({"num_hidden_layers": 3}, "model.layers.2.input_layernorm.weight is missing"),
        ({"hidden_size": 32, "head_dim": None}, "expected floating point (6, 32)"),
    ],
)
def test_config_keys_are_read_or_refused_by_name(tmp_path, llama, changes, words):
    with pytest.raises(models.ModelError, match="changed") as err:
        models.load(copy_with(tmp_path, llama[0], **changes))
    assert words in str(err.value)


def test_every_key_of_transformers_llama_config_is_in_the_table():
    known = llama_dir.keys()
    missing = [k for k in transformers.LlamaConfig().to_dict() if k not in known]
    assert not missing, (
        f"LlamaConfig keys with no decision in scratch/models/llama_dir.py: {missing}"
    )


def test_the_readme_table_lists_each_key_as_the_code_decides():
    text = (Path(__file__).parent.parent / "docs" / "learn" / "models.md").read_text(
        encoding="utf-8"
    )
    rows = re.findall(r"^\| `(\w+)` \| llama \| (implemented|refused|irrelevant) \|", text, re.M)
    assert len(rows) > 20, "docs/learn/models.md has no table of a Llama directory's config keys"
    assert dict(rows) == llama_dir.keys()
