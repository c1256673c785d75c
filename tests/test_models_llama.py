"""SmolLM2-135M-Instruct (Llama family) in NumPy float64 vs transformers in float64.

The model and the reference are loaded once per session (each takes seconds to dequantize);
the reference is transformers' own modeling_llama with its float32 casts widened and its own
GGUF reader's weights (tests/llama_reference.py).
"""

import contextlib
import io
import math
import threading

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
pytest.importorskip("gguf")
pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

import scratch  # noqa: E402
from scratch import models  # noqa: E402
from scratch.backends import numpy_llama as fast  # noqa: E402
from scratch.models import llama  # noqa: E402
from scratch.models.__main__ import main  # noqa: E402
from scratch.models.gguf_file import smollm2_path, unpermute  # noqa: E402
from tests import llama_reference  # noqa: E402

AGREE = 1e-9
PROMPT = "The capital of France is"
TEXTS = [  # varied: digits, punctuation, code, whitespace runs, other scripts, special tokens
    PROMPT,
    "Numbers 12345 and 3.14 add up to 12348.14!",
    "def f(x):\n    return x * 2  # double",
    "  leading spaces\tand a tab\n\nand blank lines",
    "Café, naïve, déjà vu: ça va?",
    "東京は日本の首都です。",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "Attention is all you need. " * 3,
    "emoji 🙂 and symbols ∑ ≤ → ©",
    "URLs like https://example.com/a?b=c&d=e are tokens too",
]


@pytest.fixture(scope="session")
def smol(smollm2):
    """The conftest's SmolLM2, loaded once per test session (skipped, saying why, if absent)."""
    return smollm2


@pytest.fixture(scope="module")  # built once; its 1 GB of float64 freed after this file
def reference(smol):
    return llama_reference.reference(smol.path)


@pytest.fixture(scope="session")
def generation(smol):
    return smol.generate(PROMPT, 8)


@pytest.fixture(scope="session")
def runs(smol):
    return {text: smol.run(text) for text in TEXTS}


def test_the_packaged_file_is_verified_and_read_once(smol):
    assert smol.name == "SmolLM2-135M-Instruct"
    assert smol.path == smollm2_path().resolve()
    assert models.load("smollm2") is smol  # cached by size and modification time
    c = smol.config
    shape = (c.layers, c.heads, c.kv_heads, c.d_head, c.d_model, c.d_inner, c.vocab_size)
    assert shape == (30, 9, 3, 64, 576, 1536, 49152)
    assert (c.rope_base, c.eps, c.max_positions) == (100000.0, np.float32(1e-5), 8192)


def test_tokens_are_transformers_tokens(smol):
    hf_tokenizer = llama_reference.tokenizer(smol.path)
    for text in TEXTS:
        assert smol.tokenize(text)[1] == hf_tokenizer(text)["input_ids"], text


def test_attentions_and_logits_agree_with_transformers_in_float64(reference, runs):
    """One batch, padded on the right: causal rows never see the padding after them."""
    lengths = [len(run.ids) for run in runs.values()]
    ids = torch.full((len(runs), max(lengths)), 2)  # (batch, T_max), padding_token_id 2
    mask = torch.zeros_like(ids)  # 1 on real tokens
    for n, run in enumerate(runs.values()):
        ids[n, : lengths[n]], mask[n, : lengths[n]] = torch.tensor(run.ids), 1
    with torch.no_grad():
        out = reference(ids, attention_mask=mask, output_attentions=True)
    for n, (text, run) in enumerate(runs.items()):
        T = lengths[n]
        attentions = np.stack([a[n, :, :T, :T].numpy() for a in out.attentions])
        assert attentions.shape == run.attentions.shape
        assert np.abs(attentions - run.attentions).max() <= AGREE, text
        assert np.abs(out.logits[n, :T].numpy() - run.logits).max() <= AGREE, text


def test_the_capital_of_france(runs):
    run = runs[PROMPT]
    top = run.next_tokens(k=3)
    assert [token for token, _ in top] == [" Paris", " the", " London"]
    assert round(float(run.logits[-1].max()), 2) == 17.37
    assert 0.77 < top[0][1] < 0.78 and top[0][1] > top[1][1] > top[2][1]
    assert sum(p for _, p in run.next_tokens(k=49152)) == pytest.approx(1.0, abs=1e-12)


def test_greedy_generation_is_transformers(smol, reference, generation):
    ids = smol.tokenize(PROMPT)[1]
    with torch.no_grad():
        out = reference.generate(
            torch.tensor([ids]), max_new_tokens=8, do_sample=False, eos_token_id=None
        )
    assert generation.ids == out[0, len(ids) :].tolist()
    assert generation.text == " Paris.\n\nThe answer is:"  # the ids decoded, as above


def test_each_cached_step_is_the_full_runs_last_row(smol, generation):
    T = len(generation.prompt.ids)
    attentions, _, logits = fast.forward(
        smol.config, smol.weights, generation.prompt.ids + generation.ids
    )
    for i, (step, row) in enumerate(zip(generation.attentions, generation.logits)):
        assert step.shape == (30, 9, T + i + 1)
        assert np.abs(step - attentions[:, :, T + i, : T + i + 1]).max() <= AGREE
        assert np.abs(row - logits[T + i - 1]).max() <= AGREE


def test_sampling_is_seeded_and_checked(smol):
    a = smol.generate("Hello", 1, temperature=1.0, seed=3)
    assert a.ids == smol.generate("Hello", 1, temperature=1.0, seed=3).ids
    with pytest.raises(ValueError, match="temperature"):
        smol.generate(PROMPT, 2, temperature=-1.0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        smol.generate(PROMPT, 0)


@pytest.mark.parametrize(("layer", "head"), [(0, 0), (0, 4), (29, 8)])
def test_the_ground_truth_traces_a_head_with_rotary_and_the_shared_kv_head(runs, layer, head):
    run = runs[PROMPT]
    trace = run.trace(layer, head)  # raises if its weights differ from the forward's by > 1e-9
    weights = np.asarray(trace["weights"].value)
    assert weights.shape == (5, 5)
    assert np.abs(weights - run.attentions[layer, head]).max() <= AGREE


def test_grouped_query_heads_share_key_value_heads_in_blocks(smol):
    assert smol.family_record.kv_heads(smol.config) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [llama.kv_head(smol.config, h) for h in range(9)] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    with pytest.raises(ValueError, match="rotary positions"):
        smol.head_projections(0, 0)  # the pipeline's x @ W + b form has no place for RoPE


def test_the_forwards_head_sharing_is_scratchs_enable_gqa(smol):
    """Query head h reading key/value head kv_head(h) is what the ground truth's enable_gqa
    computes: each head of SDPA(q, k, v, enable_gqa=True) equals SDPA of q[h], k/v[kv_head(h)]."""
    rng = np.random.default_rng(2)
    q = rng.standard_normal((9, 4, 8))  # (query heads, T, d)
    k, v = rng.standard_normal((3, 4, 8)), rng.standard_normal((3, 4, 8))  # (key/value heads, S, d)
    shared, _ = scratch.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    for h in range(9):
        g = llama.kv_head(smol.config, h)
        alone, _ = scratch.scaled_dot_product_attention(q[h], k[g], v[g], is_causal=True)
        assert shared[h] == alone, h


def test_the_numpy_rotation_is_scratch_rotary():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 7, 64))  # (heads, T, d)
    positions = np.array([0, 1, 2, 5, 100, 4000, 8191], dtype=np.float64)
    mine = llama.rotate(x, positions, 100000.0)
    truth = scratch.rotary(x.tolist(), positions.tolist(), base=100000.0, pairing="half")
    assert np.abs(mine - np.asarray(truth)).max() <= 1e-12


def test_gguf_rows_with_interleaved_pairs_give_the_same_scores_as_half_pairs():
    """llama.cpp stores q, k rows so that pair i is rows 2i, 2i+1 (its permute, written here):
    interleaved rotation of those rows equals half rotation of the rows un-permuted."""
    rng = np.random.default_rng(1)
    heads, d, d_in, T = 3, 8, 5, 6
    w_hf = rng.standard_normal((heads * d, d_in))  # Hugging Face rows: pair i is (i, i + d/2)
    w_gguf = w_hf.reshape(heads, 2, d // 2, d_in).swapaxes(1, 2).reshape(heads * d, d_in)
    assert np.array_equal(unpermute(w_gguf, heads), w_hf)
    x = rng.standard_normal((T, d_in)).tolist()
    positions = list(range(T))
    for h in range(heads):
        rows = slice(h * d, (h + 1) * d)
        half = scratch.rotary(
            (np.asarray(x) @ w_hf[rows].T).tolist(), positions, base=100.0, pairing="half"
        )
        inter = scratch.rotary(
            (np.asarray(x) @ w_gguf[rows].T).tolist(), positions, base=100.0, pairing="interleaved"
        )
        scores = lambda q: np.asarray(q) @ np.asarray(q).T  # noqa: E731 (T, T)
        assert np.abs(scores(half) - scores(inter)).max() <= 1e-12


def test_the_command_line_prints_the_next_tokens(smol):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["smollm2", PROMPT, "-k", "3"]) == 0
    lines = out.getvalue().splitlines()
    assert "SmolLM2-135M-Instruct" in lines[0]
    assert "' Paris'" in lines[1] and "0.7725" in lines[1]
    assert len(lines) == 4


def test_models_without_an_output_head_refuse_next_tokens_and_generate():
    try:
        minilm = models.load()
    except models.ModelError as exc:
        pytest.skip(f"default model not installed: {exc}")
    with pytest.raises(ValueError, match="no output head"):
        minilm.run("a sentence").next_tokens()
    with pytest.raises(ValueError, match="cannot generate"):
        minilm.generate("a sentence", 2)


def test_feature_blocks_and_threads_leave_the_numbers_as_they_were(smol, monkeypatch):
    """A 70-token text: the output features shared among the cores in blocks give, bit for bit,
    what one thread gives with the same blocks, and within float64 rounding what one block
    per product gives."""
    ids = smol.tokenize(" ".join(TEXTS))[1][:70]
    assert len(ids) == 70
    shared = fast.forward(smol.config, smol.weights, ids)
    serial = lambda tasks, workers, work: [work(task) for task in tasks]  # noqa: E731
    monkeypatch.setattr(fast, "share", serial)  # the name numpy_llama.py shares the blocks with
    alone = fast.forward(smol.config, smol.weights, ids)
    # bit for bit: the same blocks, so the same calls on the same shapes, OpenBLAS on one thread
    # in both; only which thread runs a block differs
    assert shared[0].tobytes() == alone[0].tobytes() and shared[2].tobytes() == alone[2].tobytes()
    monkeypatch.setattr(fast, "cores", lambda: 1)
    monkeypatch.setattr(fast, "BLOCKS_PER_CORE", 1)
    assert fast.blocks(49152) == [slice(0, 49152)]
    whole = fast.forward(smol.config, smol.weights, ids)
    assert np.abs(whole[0] - shared[0]).max() <= 1e-13  # found: 0 on this machine's OpenBLAS
    assert np.abs(whole[2] - shared[2]).max() <= 1e-11


@pytest.mark.parametrize("n", [1, 5, 8, 20, 64, 576, 960, 1536, 49152])
@pytest.mark.parametrize("cores", [1, 2, 3, 16])
def test_feature_blocks_cover_each_feature_once(n, cores, monkeypatch):
    monkeypatch.setattr(fast, "cores", lambda: cores)
    blocks = fast.blocks(n)
    assert [i for b in blocks for i in range(b.start, b.stop)] == list(range(n))
    assert all((b.stop - b.start) % 8 == 0 for b in blocks[:-1])  # whole SIMD widths but the last
    assert len(blocks) <= max(1, cores * fast.BLOCKS_PER_CORE)


def test_silu_is_x_times_sigmoid_without_overflow_warnings():
    """Within 4 ulps of x / (1 + e^-x) where that is a normal number; below x = -700 (a result
    under 1e-300) it may flush to -0; no overflow warning anywhere."""
    x = np.concatenate([np.linspace(-60, 60, 12001), [-1e308, -800.0, -710.0, 710.0, 1e308]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        got = fast.silu(x)
    normal = x > -700
    exact = np.array([v / (1 + math.exp(-v)) for v in x[normal].tolist()])
    assert (np.abs(got[normal] - exact) <= 4 * np.spacing(np.abs(exact))).all()
    assert (np.abs(got[~normal]) <= 1e-300).all() and (got[~normal] <= 0).all()


def test_incremental_equals_full_after_a_long_prompt(smol):
    """After a 70-token prompt (three blocks of rows), each cached step is the full run's row."""
    text = smol.tokenizer.decode(smol.tokenize(" ".join(TEXTS))[1][:70])
    generation = smol.generate(text, 3)
    T = len(generation.prompt.ids)
    assert T > 64
    attentions, _, logits = fast.forward(
        smol.config, smol.weights, generation.prompt.ids + generation.ids
    )
    for i, (step, row) in enumerate(zip(generation.attentions, generation.logits)):
        assert np.abs(step - attentions[:, :, T + i, : T + i + 1]).max() <= AGREE
        assert np.abs(row - logits[T + i - 1]).max() <= AGREE


@pytest.mark.parametrize("tokens", [1, 5])
def test_few_tokens_go_to_openblas_threads_with_the_same_numbers(smol, tokens, monkeypatch):
    """Under SHARED_ROWS tokens (a generation step after a 40-token prompt; a 5-token prompt
    with SHARED_ROWS raised to 6) no product or head is handed to our worker threads, and the
    attentions, logits and cache equal what the shared blocks give within float64 rounding (the
    bounds of the test above; OpenBLAS picks other kernels for one product than for blocks)."""
    assert fast.SHARED_ROWS == 2  # a single new token
    if tokens > 1:
        monkeypatch.setattr(fast, "SHARED_ROWS", tokens + 1)
    ids = smol.tokenize(" ".join(TEXTS))[1][:40]
    _, _, _, cache = fast.step(smol.config, smol.weights, ids)
    new, past = (ids[:1], cache) if tokens == 1 else (ids[:tokens], None)
    handed = []
    share = fast.share

    def counted(tasks, workers, work):
        handed.append(workers)
        return share(tasks, workers, work)

    monkeypatch.setattr(fast, "share", counted)
    few = fast.step(smol.config, smol.weights, new, past)
    assert handed == [1] * smol.config.layers  # only the heads, on this thread
    monkeypatch.setattr(fast, "SHARED_ROWS", 1)
    shared = fast.step(smol.config, smol.weights, new, past)
    assert len(handed) > 2 * smol.config.layers and max(handed) == fast.cores()
    assert np.abs(few[0] - shared[0]).max() <= 1e-13
    assert np.abs(few[2] - shared[2]).max() <= 1e-11
    for a, b in zip(few[3].k + few[3].v, shared[3].k + shared[3].v):
        assert np.abs(a - b).max() <= 1e-11


def _best_worst_cost(T: int, past: int, parts: int) -> int:
    """The smallest largest block cost over every cut of T rows into at most `parts` blocks
    (dynamic programming over the cut points: the brute force row_blocks' search must match)."""
    cost = lambda r0, r1: (r1 - r0) * (fast.ROW_KEYS + past + r1)  # noqa: E731
    best = [0] + [math.inf] * T  # best[i]: rows 0..i-1 in the blocks so far
    for _ in range(parts):
        best = [0] + [min(max(best[j], cost(j, i)) for j in range(i)) for i in range(1, T + 1)]
    return best[T]


@pytest.mark.parametrize(
    "T, past, parts",
    [(1, 0, 1), (1, 40, 2), (2, 0, 2), (9, 0, 3), (70, 0, 2), (128, 0, 2), (128, 0, 4),
     (16, 128, 2), (100, 1000, 2), (5, 3, 16), (33, 7, 3)],
)  # fmt: skip
def test_attention_row_blocks_cover_each_row_once_at_the_least_largest_cost(T, past, parts):
    blocks = fast.row_blocks(T, past, parts)
    assert [r for b in blocks for r in range(b.start, b.stop)] == list(range(T))
    assert 1 <= len(blocks) <= parts
    worst = max((b.stop - b.start) * (fast.ROW_KEYS + past + b.stop) for b in blocks)
    assert worst == _best_worst_cost(T, past, parts)


def test_the_projections_turn_q_and_k_heads_as_rotate_does(smol, monkeypatch):
    """_projections in blocks of whole heads: q, k and v are x @ w.T within float64 rounding of
    one product, and its turned q and k heads are, bit for bit, rotate() of those very products
    (any block split: one block per head on 4 cores too)."""
    c, w = smol.config, smol.weights["blk.3.attn_qkv.weight"]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((21, c.d_model))  # (T, d_model)
    positions = np.arange(7, 28, dtype=np.float64)  # a text after 7 cached tokens
    cos, sin = (a[:, None] for a in fast.angles(positions, c.d_head, c.rope_base))
    T, d, n = 21, c.d_head, c.heads + c.kv_heads
    for cores in (2, 4, 16):
        monkeypatch.setattr(fast, "cores", lambda: cores)  # noqa: B023
        qkv, turned = fast._projections(c, x, w, cos, sin)
        assert np.abs(qkv - x @ w.T).max() <= 1e-12
        heads = qkv[:, : n * d].reshape(T, n, d).transpose(1, 0, 2)  # (n, T, d)
        truth = llama.rotate(heads, positions, c.rope_base).transpose(1, 0, 2).reshape(T, n * d)
        # bit for bit: elementwise products and sums of the same numbers (no BLAS after qkv)
        assert turned.tobytes() == truth.tobytes()


def test_a_steps_results_are_its_own_after_the_next_step(smol):
    """The layers' temporaries live in buffers each thread keeps (fast.scratch); nothing a step
    returns or caches may be one of them: a second step on another text leaves the first's
    attentions, inputs, logits and cache as they were, bit for bit; and each layer's input and
    keys are its own (no two layers share them)."""
    first_ids = smol.tokenize(TEXTS[1])[1][:17]
    second_ids = smol.tokenize(TEXTS[4])[1][:12]  # fewer rows: a kept buffer would be reused
    assert (len(first_ids), len(second_ids)) == (17, 12)
    first = fast.step(smol.config, smol.weights, first_ids)
    before = [first[0].copy(), [x.copy() for x in first[1]], first[2].copy()]
    cached = [a.copy() for a in first[3].k + first[3].v]
    assert not any(np.array_equal(a, b) for a, b in zip(first[1], first[1][1:]))
    assert not any(np.array_equal(a, b) for a, b in zip(first[3].k, first[3].k[1:]))
    fast.step(smol.config, smol.weights, second_ids)
    fast.step(smol.config, smol.weights, second_ids[:1], first[3])  # a cached step too
    assert first[0].tobytes() == before[0].tobytes()
    assert all(x.tobytes() == y.tobytes() for x, y in zip(first[1], before[1]))
    assert first[2].tobytes() == before[2].tobytes()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first[3].k + first[3].v, cached))


def test_scratch_keeps_one_buffer_per_thread_and_name_up_to_its_limit():
    a = fast.scratch("test-a", (4, 6))
    assert fast.scratch("test-a", (3, 5)).base is a.base  # smaller: the same memory
    assert fast.scratch("test-b", (4, 6)).base is not a.base  # another name, another buffer
    grown = fast.scratch("test-a", (10, 10))  # larger: a new buffer, kept from now on
    assert grown.shape == (10, 10) and fast.scratch("test-a", (2, 2)).base is grown.base
    other = []
    thread = threading.Thread(target=lambda: other.append(fast.scratch("test-a", (4, 6))))
    thread.start()
    thread.join()
    assert other[0].base is not grown.base  # each thread its own
    huge = (fast.SCRATCH_BYTES // 8 + 1,)
    x, y = fast.scratch("test-a", huge), fast.scratch("test-a", huge)  # over the limit: fresh
    assert x.base is None and y.base is None and not np.shares_memory(x, y)
