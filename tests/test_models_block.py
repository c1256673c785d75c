"""scratch.models.block: one layer written out step by step (embeddings, norm, attention,
residual, MLP, output) agrees with the model run and with transformers' hidden states."""

import dataclasses

import pytest

from tests.model_dirs import AGREE, TEXT, build, gap, torch  # noqa: E402 (skips without them)

np = pytest.importorskip("numpy")

from scratch import models  # noqa: E402
from scratch.models.block import TOP, layer_block  # noqa: E402

PROMPT = "The capital of France is"
LLAMA = ["embeddings", "input", "norm", "attention", "attention output", "residual", "norm 2",
         "mlp", "mlp output", "residual 2", "output"]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random GPT-2 and BERT saved by transformers: {family: (our model, theirs)}."""
    root = tmp_path_factory.mktemp("block")
    theirs = {f: build(root / f, f) for f in ("gpt2", "bert")}
    return {f: (models.load(root / f), model) for f, model in theirs.items()}


def _hidden(theirs, ids) -> list:
    """transformers' hidden states: the embeddings' sum, then each layer's output (T, d)."""
    with torch.no_grad():
        out = theirs(torch.tensor([ids]), output_hidden_states=True)
    return [h[0].double().numpy() for h in out.hidden_states]


def test_a_smollm2_block_has_every_stage_with_its_shape_and_the_runs_numbers(smollm2):
    run = smollm2.run(PROMPT)
    T = len(run.ids)
    for layer in (0, 17, 29):
        b = layer_block(run, layer)
        assert b.names() == LLAMA and b.family == "llama"
        widths = {"attention": (9, T, T), "mlp": (T, 1536), "output": (T, TOP)}
        for stage in b.stages:
            assert stage.value.shape == widths.get(stage.name, (T, 576)), stage.name
        # what the heads read: the same float64 sums, perhaps in another order (row blocks)
        assert gap(b["norm"].value, run.inputs[layer]) <= 1e-12
        assert gap(b["attention"].value, run.attentions[layer]) <= 1e-9
        assert np.array_equal(b["residual"].value, b["input"].value + b["attention output"].value)
        want = b["residual"].value + b["mlp output"].value
        assert np.array_equal(b["residual 2"].value, want)
    top = run.next_tokens(TOP)
    assert list(b["output"].columns) == [t for t, _ in top]  # ' Paris', ' the', ...
    assert gap(b["output"].value[-1], np.sort(run.logits[-1])[::-1][:TOP]) == 0.0
    assert np.array_equal(b["embeddings"].value, smollm2.weights["token_embd.weight"][run.ids])


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_a_block_is_transformers_hidden_states_layer_by_layer(tiny, family):
    ours, theirs = tiny[family]
    run = ours.run(TEXT)
    hidden = _hidden(theirs, run.ids)
    for layer in range(ours.layers):
        b = layer_block(run, layer)
        if family == "gpt2" or layer > 0:  # BERT's hidden_states[0] is after its LayerNorm
            assert gap(b["input"].value, hidden[layer]) <= AGREE, (family, layer, "input")
        if family == "bert" or layer + 1 < ours.layers:  # GPT-2's last has ln_f applied
            assert gap(b["residual 2"].value, hidden[layer + 1]) <= AGREE, (family, layer)
        assert np.array_equal(b["residual"].value, b["input"].value + b["attention output"].value)
    names = b.names()
    assert names[:2] == ["embeddings", "positions"] and names[-1] == "output"
    # GPT-2 normalises before attention (pre-LN), BERT after the residual (post-LN)
    before = names.index("norm") < names.index("attention")
    assert before == (family == "gpt2")


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_a_block_that_disagrees_with_the_run_is_refused(tiny, family):
    ours, _ = tiny[family]
    run = ours.run(TEXT)
    attentions = run.attentions.copy()
    attentions[1, 0, -1, 0] += 1e-6  # one weight of layer 1, head 0 moved
    bad = dataclasses.replace(run, attentions=attentions)
    with pytest.raises(RuntimeError, match="layer 1 attention: the block differs"):
        layer_block(bad, 1)
