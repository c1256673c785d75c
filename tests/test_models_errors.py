"""Bad model directories and texts: a ValueError/TypeError naming the file and key, at load.

The fuzz at the end sets config keys to odd values: each is refused naming the key, or the
attentions still match transformers (bit for bit unchanged where only irrelevant keys moved).
"""

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

pytest.importorskip("torch")  # transformers brings numpy, safetensors, tokenizers
pytest.importorskip("transformers")

from scratch import models  # noqa: E402
from scratch.models import config as cfg  # noqa: E402
from scratch.models.files import bfloat16_to_float32  # noqa: E402
from scratch.models.layers import ACTIVATIONS  # noqa: E402
from tests.model_dirs import (  # noqa: E402
    AGREE,
    DELETE,
    TEXT,
    WORDS,
    build,
    edited,
    gap,
    hf_attentions,
    np,
    save_both,
    torch,
    transformers,
    word_tokenizer,
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One tiny model of each family, saved once; tests edit copies."""
    return save_both(tmp_path_factory)


@pytest.mark.parametrize(
    ("family", "changes", "message"),
    [
        # more layers than the weights hold
        (
            "bert",
            {"num_hidden_layers": 4},
            r"encoder\.layer\.3\..* missing: .*num_hidden_layers is 4",
        ),
        (
            "gpt2",
            {"n_layer": 7},
            r"h\.3\..* missing: config\.json's n_layer is 7, the file holds 3",
        ),
        # more positions than the position table has
        (
            "bert",
            {"max_position_embeddings": 20},
            r"position_embeddings.*max_position_embeddings 20",
        ),
        ("gpt2", {"n_positions": 1024}, r"wpe\.weight has shape \(16, 12\).*n_positions 1024"),
        # a width that contradicts the weights
        (
            "bert",
            {"hidden_size": 16},
            r"word_embeddings\.weight has shape \(10, 8\).*hidden_size 16",
        ),
        ("gpt2", {"n_embd": 6, "n_head": 3}, r"wte\.weight has shape \(10, 12\).*n_embd 6"),
        ("gpt2", {"n_inner": 20}, r"mlp\.c_fc\.weight has shape \(12, 48\).*n_inner 20"),
        ("bert", {"type_vocab_size": 5}, r"token_type_embeddings.*type_vocab_size 5"),
        ("bert", {"vocab_size": 99}, r"word_embeddings.*vocab_size 99"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 8 else None,
)
def test_a_config_that_contradicts_the_weights_is_refused_at_load(
    saved, tmp_path, family, changes, message
):
    path = edited(saved, tmp_path, family, **changes)
    with pytest.raises(models.ModelError, match=r"model\.safetensors: .*" + message):
        models.load(path)


@pytest.mark.parametrize(
    ("family", "changes", "message"),
    [
        ("bert", {"model_type": ["bert"]}, r"model_type \['bert'\] is not supported"),
        ("bert", {"model_type": None}, r"model_type None is not supported"),
        (
            "bert",
            {"num_attention_heads": "abc"},
            r"num_attention_heads expected a whole number >= 1, found 'abc'",
        ),
        (
            "bert",
            {"num_attention_heads": None},
            r"num_attention_heads expected a whole number >= 1, found None",
        ),
        ("gpt2", {"n_head": 0}, r"n_head expected a whole number >= 1, found 0"),
        ("gpt2", {"n_head": 2.0}, r"n_head expected a whole number >= 1, found 2\.0"),
        ("gpt2", {"n_head": True}, r"n_head expected a whole number >= 1, found True"),
        ("gpt2", {"n_head": 5}, r"n_head 5 does not divide n_embd 12"),
        (
            "bert",
            {"layer_norm_eps": "abc"},
            r"layer_norm_eps expected a finite number >= 0, found 'abc'",
        ),
        (
            "gpt2",
            {"layer_norm_epsilon": -1e-5},
            r"layer_norm_epsilon expected a finite number >= 0",
        ),
        ("gpt2", {"layer_norm_epsilon": None}, r"layer_norm_epsilon expected a finite number >= 0"),
        ("bert", {"is_decoder": "yes"}, r"is_decoder expected true or false, found 'yes'"),
        ("gpt2", {"scale_attn_weights": 0}, r"scale_attn_weights expected true or false, found 0"),
        ("bert", {"hidden_act": ["gelu"]}, r"hidden_act \['gelu'\] is not supported"),
        (
            "gpt2",
            {"n_embd": 12, "hidden_size": 24},
            r"n_embd 12 and hidden_size 24 name one number",
        ),
        ("gpt2", {"n_embd": 12, "hidden_size": 12.0}, r"n_embd 12 and hidden_size 12\.0 name one"),
    ],
)
def test_a_bad_config_value_is_named_at_load(saved, tmp_path, family, changes, message):
    path = edited(saved, tmp_path, family, **changes)
    with pytest.raises(models.ModelError, match=r"config\.json: " + message):
        models.load(path)


def test_aliases_that_agree_are_one_key(saved, tmp_path):
    path = edited(saved, tmp_path, "gpt2", hidden_size=12, num_hidden_layers=3, n_head=3)
    assert models.load(path).d_model == 12


def test_a_tokenizer_past_the_vocabulary_is_refused_at_load(saved, tmp_path):
    path = edited(saved, tmp_path, "bert")
    word_tokenizer(path, words=[*WORDS, "extra"])  # id 10, the table has 10 rows
    with pytest.raises(
        models.ModelError, match=r"tokenizer\.json: token 'extra' has id 10, past .*vocab_size 10"
    ):
        models.load(path)


def test_fewer_layers_than_the_weights_hold_run_the_first_ones(saved, tmp_path):
    path = edited(saved, tmp_path, "gpt2", n_layer=2)
    run = models.load(path).run(TEXT)
    assert run.attentions.shape[0] == 2
    assert gap(hf_attentions(saved["gpt2"][1], run.ids)[:2], run.attentions) <= AGREE


def test_an_edited_directory_is_read_again(saved, tmp_path):
    path = edited(saved, tmp_path, "gpt2")
    assert models.load(path).layers == 3
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "n_layer": 1}, indent=1))
    assert models.load(path).layers == 1


# --- bfloat16 weights ---------------------------------------------------------------------


def test_bfloat16_bits_widen_as_torch_converts_them():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)  # every bfloat16 there is
    with np.errstate(invalid="ignore"):  # signalling NaNs become quiet ones, as in torch
        ours = bfloat16_to_float32(bits).astype(np.float64)
    theirs = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).to(torch.float64).numpy()
    nan = np.isnan(theirs)
    assert np.array_equal(np.isnan(ours), nan) and nan.sum() == 2 * 127  # 2 signs x 127 payloads
    assert np.array_equal(ours[~nan], theirs[~nan])
    assert np.array_equal(np.signbit(ours[~nan]), np.signbit(theirs[~nan]))  # -0.0 stays -0.0


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_a_16_bit_model_runs_as_transformers_runs_it(tmp_path, family, dtype):
    hf = build(tmp_path / "m", family, seed=5, dtype=getattr(torch, dtype)).double()  # exact
    run = models.load(tmp_path / "m").run(TEXT)
    assert gap(hf_attentions(hf, run.ids), run.attentions) <= AGREE


def test_a_weight_of_another_kind_is_named(saved, tmp_path):
    from safetensors.numpy import load_file, save_file

    path = edited(saved, tmp_path, "gpt2")
    weights = load_file(str(path / "model.safetensors"))
    weights["h.0.ln_1.weight"] = np.ones(12, dtype=np.int32)
    save_file(weights, str(path / "model.safetensors"))
    with pytest.raises(
        models.ModelError, match=r"model\.safetensors: h\.0\.ln_1\.weight holds int32"
    ):
        models.load(path)
    weights["h.0.ln_1.weight"] = np.ones(12, dtype=np.float32)
    del weights["h.1.attn.c_attn.bias"]
    save_file(weights, str(path / "model.safetensors"))
    with pytest.raises(models.ModelError, match=r"h\.1\.attn\.c_attn\.bias is missing"):
        models.load(path)


def test_float8_weights_and_a_config_nested_too_deep_are_named(saved, tmp_path):
    from safetensors.torch import save_file

    path = edited(saved, tmp_path, "gpt2")
    save_file(
        {"wte.weight": torch.zeros(10, 12).to(torch.float8_e4m3fn)}, path / "model.safetensors"
    )
    with pytest.raises(
        models.ModelError, match=r"model\.safetensors: tensor wte\.weight is F8_E4M3"
    ):
        models.load(path)
    (path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(
        models.ModelError, match=r"config\.json: not readable JSON \(RecursionError"
    ):
        models.load(path)


# --- texts --------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["\ud800", "one \ud800 step", "\udfff"])
def test_a_lone_surrogate_is_refused_naming_text(saved, text):
    model = models.load(saved["bert"][0])
    with pytest.raises(ValueError, match=r"^text: .* lone surrogate"):
        model.run(text)


@pytest.mark.parametrize("text", ["\u200b", "\x00", "\u200b\x00\ufeff", "\x00 \u200b \x00"])
def test_a_text_of_no_words_is_refused(saved, text):
    model = models.load(saved["bert"][0])
    with pytest.raises(ValueError, match=r"^text: no word tokens .*\[CLS\] \[SEP\]"):
        model.run(text)
    assert model.run("one" + text + " step").tokens == ["[CLS]", "one", "step", "[SEP]"]


def test_the_default_model_refuses_them_too():
    try:
        minilm = models.load()
    except models.ModelError as exc:
        pytest.skip(f"default model not installed: {exc}")
    for text in ("\u200b\u200b", "\x00", "\ud800 step"):
        with pytest.raises(ValueError, match="^text: "):
            minilm.run(text)


# --- similar escapes: config values fuzzed ------------------------------------------------


VALUES = st.one_of(
    st.just(DELETE),
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0.0, 1.0),
    st.sampled_from(["abc", "", "12", "absolute", "relative_key", "bert", "gpt2", "prelu"]),
    st.sampled_from(sorted(ACTIVATIONS)),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(
        st.sampled_from(["0", "1"]), st.lists(st.integers(0, 2), max_size=2), max_size=1
    ),
)


@st.composite
def changes(draw):
    """A family and one or two of its config keys (half the time ones that compute) changed."""
    family = draw(st.sampled_from(["gpt2", "bert"]))
    table = cfg.keys(family)
    computing = sorted(k for k, what in table.items() if what != "irrelevant")
    key = st.one_of(st.sampled_from(computing), st.sampled_from(sorted(table)))
    return family, draw(st.dictionaries(key, VALUES, min_size=1, max_size=2))


def names_in(message):
    """Every config key a message names (as a whole word)."""
    words = set(message.replace(",", " ").replace("'", " ").replace(":", " ").split())
    return {key for family in cfg.NAMES for key in cfg.keys(family) if key in words}


@pytest.fixture(scope="module")
def baseline(saved):
    """Each saved model's attentions on TEXT, as this package computes them."""
    return {family: models.load(saved[family][0]).run(TEXT).attentions for family in saved}


@given(case=changes())
def test_a_fuzzed_config_is_refused_by_name_or_still_matches(
    saved, baseline, tmp_path_factory, case
):
    family, change = case
    folder = Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp()))
    path = edited(saved, folder, family, **change)
    try:
        run = models.load(path).run(TEXT)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        assert isinstance(exc, models.ModelError), message
        assert message.startswith(str(path / "config.json")) or message.startswith(
            (str(path / "model.safetensors"), str(path / "tokenizer.json"))
        ), message
        assert names_in(message) & set(change), (change, message)
        event("refused")
        return
    computing = {k: v for k, v in change.items() if cfg.keys(family)[k] != "irrelevant"}
    if not computing:
        assert np.array_equal(run.attentions, baseline[family]), change  # bit for bit
        event("irrelevant keys only: the same attentions")
        return
    # transformers refuses some values of irrelevant keys (initializer_range null): its
    # reference gets only the keys that compute (the irrelevant ones change nothing, above)
    eps = ("layer_norm_eps", "layer_norm_epsilon")  # transformers wants 0.0, not 0: one number
    computing = {
        k: float(v) if k in eps and isinstance(v, int) else v for k, v in computing.items()
    }
    reference = edited(saved, folder / "reference", family, **computing)
    hf = transformers.AutoModel.from_pretrained(
        reference, dtype=torch.float64, attn_implementation="eager"
    ).eval()
    assert gap(hf_attentions(hf, run.ids), run.attentions) <= AGREE, change
    event("computed: agrees with transformers")
