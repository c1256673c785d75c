"""scratch.models.decoding: a generation continued one token per call (the window's Generate)
equals Model.generate and a full run of every token, row for row."""

import pytest

np = pytest.importorskip("numpy")

from scratch.models import decoding  # noqa: E402

PROMPT = "The capital of France is"
FLOAT64 = 1e-12  # the same sums in another order: a few float64 roundings of O(1) numbers


@pytest.fixture(scope="module")
def three(smollm2):
    """The prompt and three greedy tokens, one call each."""
    d = decoding.start(smollm2, PROMPT)
    steps = [d]
    for _ in range(3):
        steps.append(steps[-1].extend())
    return steps


def test_greedy_steps_are_model_generate(smollm2, three):
    gen = smollm2.generate(PROMPT, 3)
    last = three[-1]
    assert list(last.ids) == gen.ids
    assert [d.length for d in three] == [5, 6, 7, 8]  # the cache grows by one token per call
    assert last.tokens[5:] == gen.tokens
    for i, row in enumerate(last.rows):
        assert row.shape == gen.attentions[i].shape == (30, 9, 6 + i)
        assert np.abs(row - gen.attentions[i]).max() <= FLOAT64, f"step {i}"


def test_the_assembled_weights_and_next_tokens_equal_a_full_run(three):
    last = three[-1]
    full = last.run()  # one forward over every token so far
    assert full.ids == [*last.prompt.ids, *last.ids]
    weights = last.attentions()
    assert weights.shape == full.attentions.shape == (30, 9, 8, 8)
    gap = np.abs(weights - full.attentions).max()
    assert gap <= FLOAT64, f"assembled weights differ from the full run's by {gap:.3g}"
    mine, theirs = last.next_tokens(10), full.next_tokens(10)
    assert [t for t, _ in mine] == [t for t, _ in theirs]
    assert np.allclose([p for _, p in mine], [p for _, p in theirs], rtol=0, atol=FLOAT64)


def test_each_chosen_token_keeps_its_probability(three):
    # step 1 chose ' Paris' with the prompt's own top probability
    first_token, first_p = three[0].next_tokens(1)[0]
    assert three[1].tokens[-1] == first_token == " Paris"
    assert three[1].chances == pytest.approx((first_p,), abs=FLOAT64)
    assert len(three[-1].chances) == 3


def test_seeded_sampling_repeats_and_seeds_differ(three):
    start = three[0]
    draws = {seed: start.extend(3.0, seed).ids[-1] for seed in range(2)}
    assert start.extend(3.0, 1).ids[-1] == draws[1]  # the same seed, the same draw
    assert draws[0] != draws[1], "two seeds at temperature 3 drew one token"


@pytest.mark.parametrize(
    ("temperature", "seed", "error", "words"),
    [
        (-1.0, None, ValueError, "temperature: expected a finite number >= 0"),
        (float("nan"), None, ValueError, "temperature: expected a finite number >= 0"),
        (1.0, "3", TypeError, "seed: expected None or an int"),
    ],
)
def test_bad_sampling_options_are_refused(three, temperature, seed, error, words):
    with pytest.raises(error, match=words):
        three[0].extend(temperature, seed)


def test_an_encoder_cannot_start_a_decoding(smollm2):
    from dataclasses import replace

    encoder = replace(smollm2, config=replace(smollm2.config, family="bert"))  # no output head
    with pytest.raises(ValueError, match="is not a decoder with an output head"):
        decoding.start(encoder, "a text")


def test_a_decoder_head_session_projects_x_and_turns_q_and_k_by_rope(smollm2):
    """gui.state.model_session: x is the layer's RMSNorm'd input, W_q the head's columns, W_k and
    W_v
    its key/value head's (GQA: head 5 reads KV head 1), the variant causal + RoPE (half pairing,
    base 100000); its trace's weights are the run's and its rotated q, k, output the ground
    truth's (no Qt)."""
    from gui.state import controller
    from gui.state.model_session import head_session

    run = smollm2.run(PROMPT)
    for layer, head in ((0, 0), (7, 5), (29, 8)):
        s = head_session(run, layer, head)
        assert np.array_equal(np.asarray(s.query), run.inputs[layer])  # (T, d_model)
        trace = controller.run(s).trace
        assert {"q_rotated", "k_rotated"} <= set(trace.names())
        gap = np.abs(np.asarray(trace["weights"].value) - run.attentions[layer, head]).max()
        assert gap <= 1e-9, f"layer {layer} head {head}: weights {gap:.3g} from the run's"
        truth = run.trace(layer, head)  # q, k turned by scratch.rotary, k and v of KV head h // 3
        pairs = (("q", "q_rotated"), ("k", "k_rotated"), ("v", "v"), ("output", "output"))
        for name, step in pairs:
            gap = np.abs(np.asarray(trace[step].value) - np.asarray(truth[name].value)).max()
            assert gap <= FLOAT64, f"layer {layer} head {head} {step}: {gap:.3g}"
        assert s.mode == "project" and (s.variant.mask, s.variant.rope) == ("causal", "half")
