"""The GGUF parser and dequantizer against gguf's own (GGUFReader, gguf.quants), the metadata
key table against docs/learn/models.md, and cut or corrupt files refused as GGUFErrors only."""

import re
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from scratch import models  # noqa: E402
from scratch.models import gguf_file  # noqa: E402
from scratch.models.dequantize import to_float64  # noqa: E402
from scratch.models.gguf_read import GGUFError, read  # noqa: E402
from tests.test_models_gguf import metadata, weights, write  # noqa: E402

Q = gguf.GGMLQuantizationType


def gguf_reader(path: Path) -> tuple[dict, list]:
    """gguf.GGUFReader's metadata (its GGUF.* header entries left out) and tensors."""
    reader = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    return meta, reader.tensors


def same_as_gguf_reader(path: Path) -> None:
    """read() gives GGUFReader's keys, values, value types, tensor names, shapes and bytes."""
    meta, found = read(path)
    their_meta, theirs = gguf_reader(path)
    assert meta == their_meta
    assert [type(v) for v in meta.values()] == [type(v) for v in their_meta.values()]
    assert [t.name for t in found] == [t.name for t in theirs]
    for mine, their in zip(found, theirs):
        assert mine.kind == their.tensor_type, mine.name
        assert mine.shape == tuple(int(n) for n in reversed(their.shape)), mine.name
        assert np.array_equal(mine.data, np.asarray(their.data).view(np.uint8).reshape(-1))


def test_every_value_type_is_read_as_gguf_reads_it(tmp_path):
    writer = gguf.GGUFWriter(str(tmp_path / "values.gguf"), "llama")
    writer.add_uint8("u8", 200)
    writer.add_int8("i8", -100)
    writer.add_uint16("u16", 60000)
    writer.add_int16("i16", -30000)
    writer.add_uint32("u32", 4_000_000_000)
    writer.add_int32("i32", -2_000_000_000)
    writer.add_float32("f32", 1e-5)
    writer.add_uint64("u64", 2**63)
    writer.add_int64("i64", -(2**62))
    writer.add_float64("f64", 0.1)
    writer.add_bool("b", True)
    writer.add_string("s", "naïve 東京 🙂")
    writer.add_array("ints", [1, 2, 3])
    writer.add_array("floats", [0.5, 1e-5])
    writer.add_array("strings", ["a", "", "Ġb"])
    writer.add_array("bools", [True, False])
    writer.add_tensor("t", np.arange(64, dtype=np.float32).reshape(2, 32))
    writer.add_tensor(
        "q", gguf.quants.quantize(np.ones((3, 64), np.float32), Q.Q8_0), raw_dtype=Q.Q8_0
    )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    same_as_gguf_reader(tmp_path / "values.gguf")
    assert read(tmp_path / "values.gguf")[1][1].shape == (3, 64)


def test_the_packaged_file_is_read_as_gguf_reads_it():
    try:
        path = gguf_file.smollm2_path()
    except models.ModelError as exc:
        pytest.skip(f"SmolLM2 not installed: {exc}")
    same_as_gguf_reader(path)


@pytest.mark.parametrize("kind", [Q.F32, Q.F16, Q.Q8_0, Q.Q4_0, Q.Q4_1])
def test_each_type_widens_to_gguf_dequantize_bit_for_bit(kind):
    rng = np.random.default_rng(int(kind))
    scales = rng.choice([1e-3, 1.0, 50.0], (6, 1))  # rows of small, plain and large numbers
    values = (rng.standard_normal((6, 128)) * scales).astype(np.float32)
    values[0, :32] = 0.0  # a block of zeros: d = 0
    values[1, :32] = 3.0  # a constant block: Q4_1's offset alone
    raw = values if kind == Q.F32 else gguf.quants.quantize(values, kind)
    data = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    out = np.empty((6, 128))
    to_float64(data, kind.name, (6, 128), out)
    expected = gguf.quants.dequantize(raw, kind).astype(np.float64).reshape(6, 128)
    assert out.tobytes() == expected.tobytes()


def test_q4_1_rounds_d_q_plus_m_to_float32_as_gguf_does():
    """A block whose d q + m needs more than float32's 24 bits (m = 1000, d = 0.001): the
    widened numbers are gguf's float32 ones, not the exact float64 sum."""
    rng = np.random.default_rng(7)
    blocks = np.zeros((4, 20), np.uint8)
    for n, (d, m) in enumerate([(1e-3, 1000.0), (3e-5, -7.0), (0.5, 1e-4), (1.0, 0.0)]):
        blocks[n, :2] = np.array([d], np.float16).view(np.uint8)
        blocks[n, 2:4] = np.array([m], np.float16).view(np.uint8)
        blocks[n, 4:] = rng.integers(0, 256, 16)
    out = np.empty((1, 128))
    to_float64(blocks.reshape(-1), "Q4_1", (1, 128), out)
    expected = gguf.quants.dequantize(blocks.reshape(1, -1), Q.Q4_1).astype(np.float64)
    assert out.tobytes() == expected.tobytes()
    assert out[0, 1] != 1000.0 + float(np.float16(1e-3)) * (blocks[0, 4] & 15)  # it rounds


def test_the_loaded_weights_are_gguf_dequantize_widened_with_transformers_row_order():
    """Every SmolLM2 tensor as the reference (tests/llama_reference.py) builds it: gguf's
    dequantizer, q and k rows put back by transformers' own LlamaTensorProcessor."""
    pytest.importorskip("transformers")
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    try:
        smol = models.load("smollm2")
    except models.ModelError as exc:
        pytest.skip(f"SmolLM2 not installed: {exc}")
    c = smol.config
    unpermute = LlamaTensorProcessor(
        config={"num_attention_heads": c.heads, "num_key_value_heads": c.kv_heads}
    )
    tensors = gguf.GGUFReader(str(smol.path)).tensors
    assert len(tensors) == 272
    for t in tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        w = unpermute.process(weights=w, name=t.name).weights.astype(np.float64)
        assert smol.weights[t.name].tobytes() == w.tobytes(), t.name


def test_a_cut_file_is_a_gguf_error_at_every_length(tmp_path):
    """Cut anywhere in the header, metadata or tensor table, or in the data: a GGUFError."""
    path = write(tmp_path / "whole.gguf", metadata(), weights())
    data = path.read_bytes()
    meta, found = read(path)
    end_of_table = len(data) - sum(t.data.nbytes for t in found)
    cut = tmp_path / "cut.gguf"
    for size in [*range(0, end_of_table, 3), end_of_table + 7, len(data) - 1]:
        cut.write_bytes(data[:size])
        with pytest.raises(GGUFError):
            read(cut)


def test_flipped_bytes_are_read_or_refused_as_gguf_errors(tmp_path):
    """500 seeded single-byte changes in the header and tables: parsed, or a GGUFError; never
    another exception (each one gets a message naming the file in models.load)."""
    path = write(tmp_path / "whole.gguf", metadata(), weights())
    data = path.read_bytes()
    end_of_table = len(data) - sum(t.data.nbytes for t in read(path)[1])
    rng = np.random.default_rng(0)
    bad = tmp_path / "flipped.gguf"
    refused = 0
    for _ in range(500):
        changed = bytearray(data)
        changed[rng.integers(end_of_table)] = rng.integers(256)
        bad.write_bytes(bytes(changed))
        try:
            read(bad)
        except GGUFError:
            refused += 1
    assert refused > 50  # lengths, types and counts are most of the header's bytes


def test_the_readme_table_lists_each_key_as_the_code_decides():
    text = (Path(__file__).parent.parent / "docs" / "learn" / "models.md").read_text(
        encoding="utf-8"
    )
    rows = re.findall(r"^\| `([\w.*]+)` \| (implemented|checked|irrelevant|refused) \|", text, re.M)
    assert len(rows) > 30, "docs/learn/models.md has no table of GGUF metadata keys"
    assert dict(rows) == gguf_file.keys()
    assert len(dict(rows)) == len(rows)  # no key twice


@pytest.mark.parametrize("key", sorted(gguf_file.REFUSED))
def test_each_refused_key_is_refused_by_name(tmp_path, key):
    path = write(tmp_path / "refused.gguf", {**metadata(), key: 1}, weights())
    with pytest.raises(models.ModelError, match=f"refused.gguf: metadata key {re.escape(key)} "):
        models.load(path)


def test_irrelevant_keys_change_nothing(tmp_path):
    """Each irrelevant key (and general.* names) set: the same numbers, bit for bit."""
    plain = models.load(write(tmp_path / "plain.gguf", metadata(), weights())).run("ab ab")
    extra = {key: "x" if "template" in key else 1 for key in gguf_file.IRRELEVANT}
    extra |= {"general.name": "tiny", "general.license": "mit", "general.file_type": 3}
    changed = models.load(write(tmp_path / "more.gguf", {**metadata(), **extra}, weights()))
    run = changed.run("ab ab")
    assert run.ids == plain.ids
    assert run.attentions.tobytes() == plain.attentions.tobytes()
    assert run.logits.tobytes() == plain.logits.tobytes()
