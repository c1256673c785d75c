"""Every config key that changes the forward is computed (agrees with transformers) or refused."""

import dataclasses
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")  # transformers brings numpy, safetensors, tokenizers
pytest.importorskip("transformers")

from scratch import models  # noqa: E402
from scratch.models import config as cfg  # noqa: E402
from scratch.models.layers import ACTIVATIONS  # noqa: E402
from tests.model_dirs import (  # noqa: E402
    AGREE,
    TEXT,
    build,
    gap,
    hf_attentions,
    np,
    torch,
    transformers,
)

# (family, config keys) that change the attentions; each is computed here
COMPUTED = [
    ("gpt2", {"scale_attn_by_inverse_layer_idx": True}),
    ("gpt2", {"scale_attn_weights": False}),
    ("gpt2", {"scale_attn_weights": False, "scale_attn_by_inverse_layer_idx": True}),
    ("gpt2", {"layer_norm_epsilon": 0.1}),
    ("gpt2", {"n_inner": 20}),
    ("bert", {"is_decoder": True}),
    ("bert", {"layer_norm_eps": 0.1}),
    ("bert", {"type_vocab_size": 1}),
    ("bert", {"intermediate_size": 4}),
]
ACTIVATION_KEY = {"gpt2": "activation_function", "bert": "hidden_act"}
# each activation in a whole model once, the families taking turns (each function is also
# checked on its own against transformers' below)
COMPUTED += [
    (("gpt2", "bert")[n % 2], {ACTIVATION_KEY[("gpt2", "bert")[n % 2]]: name})
    for n, name in enumerate(ACTIVATIONS)
]

# keys that cannot change a text's attentions (their README reason says why); still tested
HARMLESS = [
    ("gpt2", {"add_cross_attention": True}),
    ("bert", {"is_decoder": True, "add_cross_attention": True}),
    ("bert", {"chunk_size_feed_forward": 1}),
    ("gpt2", {"resid_pdrop": 0.9, "attn_pdrop": 0.9, "embd_pdrop": 0.9}),
    ("bert", {"hidden_dropout_prob": 0.9, "attention_probs_dropout_prob": 0.9}),
]

# the fields a plain (default) config would compute differently
VARIED = ("eps", "activation", "causal", "scale_weights", "inverse_layer_scale")


def ids_of(kw):
    return "-".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize(
    ("family", "overrides"), COMPUTED + HARMLESS, ids=[ids_of(kw) for _, kw in COMPUTED + HARMLESS]
)
def test_a_config_key_agrees_with_transformers(tmp_path, family, overrides):
    hf = build(tmp_path / "m", family, seed=len(tmp_path.name), **overrides)
    model = models.load(tmp_path / "m")
    run = model.run(TEXT)
    assert run.attentions.shape == (3, model.heads, len(run.ids), len(run.ids))
    assert gap(hf_attentions(hf, run.ids), run.attentions) <= AGREE
    layer = model.layers - 1  # the last layer: GPT-2's inverse layer scale is largest there
    trace = run.trace(layer, model.heads - 1)  # the ground truth, with the layer's own scale
    assert gap(trace["weights"].value, run.attentions[layer, -1]) <= models.run.AGREEMENT


SHAPES = ("type_vocab_size", "n_inner", "intermediate_size")  # checked against the weights


def same_as_default(family, overrides):
    """An activation within 1e-9 of the family's default on [-8, 8] (gelu_fast is gelu_new's)."""
    name = overrides.get(ACTIVATION_KEY[family])
    x = np.linspace(-8.0, 8.0, 161)
    default = ACTIVATIONS[cfg.DEFAULTS[family]["activation"]]
    return name is not None and np.max(np.abs(ACTIVATIONS[name](x) - default(x))) < 1e-9


MATTERS = [
    (f, kw)
    for f, kw in COMPUTED
    if not set(kw) & set(SHAPES)
    and not same_as_default(f, kw)
    and kw.get(ACTIVATION_KEY[f], "relu") in ("relu", "silu", "quick_gelu", "linear")
]


@pytest.mark.parametrize(("family", "overrides"), MATTERS, ids=[ids_of(c[1]) for c in MATTERS])
def test_the_key_matters_the_plain_forward_differs(tmp_path, family, overrides):
    # the agreement above can fail: ignore the key (transformers' default) and it does
    hf = build(tmp_path / "m", family, seed=3, **overrides)
    model = models.load(tmp_path / "m")
    ids = model.tokenize(TEXT)[1]
    plain = dataclasses.replace(
        model.config, **{k: v for k, v in cfg.DEFAULTS[family].items() if k in VARIED}
    )
    attentions, _ = models.model.FAMILIES[family].forward(plain, model.weights, ids)
    assert plain != model.config
    assert gap(hf_attentions(hf, ids), attentions) > 1e-4


def test_the_head_session_carries_the_layers_scale(tmp_path):
    from gui.state.model_session import head_session

    build(tmp_path / "m", "gpt2", scale_attn_by_inverse_layer_idx=True)
    run = models.load(tmp_path / "m").run(TEXT)
    session = head_session(run, 2, 1)
    assert session.scale_mode == "custom"
    assert session.scale_value == pytest.approx(1 / (2 * 3), rel=1e-15)  # 1/sqrt(4) / 3
    build(tmp_path / "plain", "gpt2")
    assert head_session(models.load(tmp_path / "plain").run(TEXT), 2, 1).scale_mode == "sqrt"


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_each_activation_is_transformers_own(name):
    from transformers.activations import ACT2FN

    x = torch.linspace(-40.0, 40.0, 4001, dtype=torch.float64)
    with torch.no_grad():
        expected = ACT2FN[name](x).numpy()
    found = ACTIVATIONS[name](x.numpy())
    # float64 both ways; a few ulp of the value (or of 1 where it is near 0)
    assert np.max(np.abs(found - expected) / np.maximum(np.abs(expected), 1.0)) <= 1e-14, name


def test_the_activation_tolerance_tells_the_closest_pair_apart():
    # gelu_fast rounds sqrt(2/pi) to 0.7978845608: the closest two functions of the table
    from transformers.activations import ACT2FN

    x = torch.linspace(-40.0, 40.0, 4001, dtype=torch.float64)
    with torch.no_grad():
        new = ACT2FN["gelu_new"](x).numpy()
    fast = ACTIVATIONS["gelu_fast"](x.numpy())
    assert np.max(np.abs(fast - new) / np.maximum(np.abs(new), 1.0)) > 1e-13


# --- refused at load, naming the file and the key -------------------------------------------


REFUSED = [
    ("bert", {"position_embedding_type": "relative_key"}, "position_embedding_type"),
    ("bert", {"position_embedding_type": "relative_key_query"}, "position_embedding_type"),
    ("bert", {"pruned_heads": {"0": [1]}}, "pruned_heads"),
    ("gpt2", {"activation_function": "prelu"}, "activation_function"),
    ("gpt2", {"activation_function": "xielu"}, "activation_function"),
    ("bert", {"hidden_act": "sqrtsoftplus"}, "hidden_act"),
    ("bert", {"hidden_act": "nope"}, "hidden_act"),
    ("bert", {"add_cross_attention": True}, "add_cross_attention"),
    ("gpt2", {"n_embd": 12, "hidden_size": 16}, "n_embd"),
]


@pytest.mark.parametrize(("family", "change", "key"), REFUSED, ids=[r[2] for r in REFUSED])
def test_a_key_this_forward_does_not_compute_is_refused_at_load(tmp_path, family, change, key):
    path = tmp_path / "m"
    build(path, family)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(models.ModelError, match=rf"config\.json: .*{key}"):
        models.load(path)


def test_an_absolute_position_embedding_type_is_accepted(tmp_path):
    hf = build(tmp_path / "m", "bert")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config.update(position_embedding_type="absolute", pruned_heads={})
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    run = models.load(tmp_path / "m").run(TEXT)
    assert gap(hf_attentions(hf, run.ids), run.attentions) <= AGREE


def test_reorder_and_upcast_attn_is_the_same_math(tmp_path):
    # transformers computes these scores in float32 (its float64 model refuses the option), so
    # its float32 model is the reference: float32 rounding, well under 1e-5, far under a change
    hf = build(tmp_path / "m", "gpt2", dtype=torch.float32, reorder_and_upcast_attn=True)
    run = models.load(tmp_path / "m").run(TEXT)
    assert gap(hf_attentions(hf, run.ids), run.attentions) <= 1e-5


# --- the table of keys: every key of transformers' configs, and the docs say the same -----


@pytest.mark.parametrize(
    ("family", "cls"), [("gpt2", "GPT2Config"), ("bert", "BertConfig")], ids=["gpt2", "bert"]
)
def test_every_key_of_transformers_config_is_in_the_table(family, cls):
    config = getattr(transformers, cls)()
    known = cfg.keys(family)
    missing = [k for k in config.to_dict() if k not in known]
    missing += [k for k in getattr(config, "attribute_map", {}) if k not in known]
    assert not missing, f"{cls} keys with no decision in scratch/models/config.py: {missing}"


def test_the_readme_table_lists_each_key_as_the_code_decides():
    text = (Path(__file__).parent.parent / "docs" / "learn" / "models.md").read_text(
        encoding="utf-8"
    )
    rows = re.findall(
        r"^\| `(\w+)` \| (gpt2|bert|both) \| (implemented|refused|irrelevant) \|", text, re.M
    )
    assert len(rows) > 30, "docs/learn/models.md has no table of config keys"
    readme = {}
    for key, family, what in rows:
        for f in ("gpt2", "bert") if family == "both" else (family,):
            readme[key, f] = what
    code = {(k, f): what for f in cfg.NAMES for k, what in cfg.keys(f).items()}
    assert readme == code
