"""A model load's progress and cancel (scratch.ops.progress): its stages in order with rising
counts,
a cancel at any piece raises Cancelled and caches nothing, and the command line's progress lines
and Ctrl+C (exit status 130). Tiny GGUF files written here (tests/test_models_gguf.py's writer)."""

import hashlib
import io

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from scratch import models  # noqa: E402
from scratch.models import files, gguf_file  # noqa: E402
from scratch.models import model as model_module  # noqa: E402
from scratch.models.__main__ import main  # noqa: E402
from scratch.ops import progress  # noqa: E402
from tests.test_models_gguf import LAYERS, metadata, weights, write  # noqa: E402

STAGES = ["hash check", "read", "dequantize", "tokenizer"]  # a packaged file's load, in order
TENSORS = 2 + 9 * LAYERS  # token table, output norm; per layer 2 norms and 7 matrices


class Recorder:
    """A report that keeps every (stage, done, total) it is given."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int]] = []

    def __call__(self, stage: str, done: int, total: int) -> None:
        self.seen.append((stage, done, total))

    def stages(self) -> list[str]:
        """The stages in the order they first reported."""
        return list(dict.fromkeys(stage for stage, _, _ in self.seen))


def packaged_load(path, monkeypatch, p: progress.Progress) -> models.Model:
    """The packaged-file load (hash check first) of `path`, outside the load cache."""
    found = hashlib.sha256(path.read_bytes()).hexdigest()  # the published hash, said here
    monkeypatch.setattr(gguf_file, "SMOLLM2_SHA256", found)
    with progress.reporting(p):
        return model_module._read_gguf(str(path), True)


def check_counts(seen: list, stage: str, total: int, step: int | None = None) -> None:
    """`stage`'s reports: one total, done from 0 rising to it (by `step` exactly, if given)."""
    rows = [(done, t) for s, done, t in seen if s == stage]
    assert rows, f"{stage}: no report"
    assert {t for _, t in rows} == {total}, f"{stage}: totals {sorted({t for _, t in rows})}"
    done = [d for d, _ in rows]
    assert done[0] == 0 and done[-1] == total, f"{stage}: from {done[0]} to {done[-1]}"
    assert all(a <= b for a, b in zip(done, done[1:])), f"{stage}: counts fall: {done}"
    if step is not None:
        assert done == list(range(0, total + 1, step)), f"{stage}: {done}"


@pytest.mark.parametrize(("seed", "piece", "cores"), [(0, 64, 1), (1, 1000, 2), (2, 4096, 2)])
def test_a_load_reports_its_stages_in_order_with_rising_counts(
    tmp_path, monkeypatch, seed, piece, cores
):
    from scratch.backends import numpy_threads

    path = write(tmp_path / f"tiny{seed}.gguf", metadata(), weights(seed))
    size = path.stat().st_size
    monkeypatch.setattr(files, "PIECE", piece)
    monkeypatch.setattr(numpy_threads, "cores", lambda: cores)  # two threads tick the count
    record = Recorder()
    loaded = packaged_load(path, monkeypatch, progress.Progress(record))
    assert record.stages() == STAGES
    order = [STAGES.index(s) for s, _, _ in record.seen]
    assert order == sorted(order), "a stage reported again after the next one began"
    check_counts(record.seen, "hash check", size)
    check_counts(record.seen, "read", size)
    pieces = [d for s, d, _ in record.seen if s == "read"]
    assert len(pieces) == 1 + -(-size // piece), f"read: {len(pieces)} reports of {piece} bytes"
    check_counts(record.seen, "dequantize", TENSORS, step=1)
    check_counts(record.seen, "tokenizer", 1, step=1)
    assert loaded.run("ab").ids == [4]  # and the model it built works


def test_a_model_run_reports_its_layers(tmp_path):
    path = write(tmp_path / "tiny.gguf", metadata(), weights(3))
    loaded = models.load(path)
    record = Recorder()
    with progress.reporting(progress.Progress(record)):
        loaded.run("ab ab")
    assert record.seen == [("forward", n, LAYERS) for n in range(1, LAYERS + 1)]


def ticks_of_a_load(path, monkeypatch) -> int:
    """How many pieces a load of `path` ticks (each a point where a cancel is seen)."""
    record = Recorder()
    packaged_load(path, monkeypatch, progress.Progress(record))
    return len(record.seen)


@pytest.mark.parametrize("cores", [1, 2])
def test_a_cancel_at_any_piece_raises_cancelled_and_builds_nothing(tmp_path, monkeypatch, cores):
    from scratch.backends import numpy_threads

    monkeypatch.setattr(numpy_threads, "cores", lambda: cores)
    monkeypatch.setattr(files, "PIECE", 512)
    path = write(tmp_path / "tiny.gguf", metadata(), weights(4))
    total = ticks_of_a_load(path, monkeypatch)
    assert total > 20
    for stop_at in range(0, total, 3):  # hash check, read, dequantize and tokenizer pieces
        record = Recorder()
        asked = lambda: len(record.seen) >= stop_at  # noqa: B023, E731
        with pytest.raises(progress.Cancelled, match="cancelled during") as caught:
            packaged_load(path, monkeypatch, progress.Progress(record, asked))
        assert not isinstance(caught.value, ValueError)  # never taken for a bad file
        assert len(record.seen) == stop_at, f"{len(record.seen)} pieces after a cancel at {stop_at}"
    # load() caches nothing of a cancelled load: the next load reads the file again
    record, before = Recorder(), model_module._load_gguf.cache_info().currsize
    with pytest.raises(progress.Cancelled):
        models.load(path, progress=progress.Progress(record, lambda: len(record.seen) > 5))
    assert model_module._load_gguf.cache_info().currsize == before
    again = Recorder()
    fresh = models.load(path, progress=progress.Progress(again))
    assert again.stages() == ["read", "dequantize", "tokenizer"]
    whole = gguf_file.read_gguf(path)[1]
    assert all(np.array_equal(fresh.weights[k], whole[k]) for k in whole)


def test_progress_refuses_what_is_not_a_progress():
    with pytest.raises(TypeError, match="progress: expected a scratch.ops.progress.Progress"):
        models.load("smollm2", progress=lambda *a: None)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_line_redraws_on_a_terminal_and_writes_a_line_per_stage_to_a_log():
    tty, log = Terminal(), io.StringIO()
    for stream in (tty, log):
        line = progress.Line(stream)
        for done in (0, 1, 1, 2, 3, 4):  # 1 twice: the same percentage is drawn once
            line("read", done, 4)
        line("dequantize", 0, 2)
        line("dequantize", 1, 2)
        line.interrupted()
    assert tty.getvalue().split("\r")[1:] == [
        "read         [........................]   0%",
        "read         [######..................]  25%",
        "read         [############............]  50%",
        "read         [##################......]  75%",
        "read         [########################] 100%\n",
        "dequantize   [........................]   0%",
        "dequantize   [############............]  50%\n",  # interrupted: the line ends
    ]
    assert log.getvalue() == "read: done\n"


def test_the_command_line_shows_each_stage_on_stderr(tmp_path, capsys):
    path = write(tmp_path / "cli.gguf", metadata(), weights(5))
    assert main([str(path), "ab", "-k", "2"]) == 0
    out, err = capsys.readouterr()
    assert err == "read: done\ndequantize: done\ntokenizer: done\nforward: done\n"
    assert out.startswith("cli: 1 tokens; next token, probability\n")


@pytest.mark.parametrize("when", [1, 10, 25])  # in read, dequantize, forward (27 pieces)
def test_a_cancel_on_the_command_line_exits_130_saying_so(tmp_path, capsys, when):
    path = write(tmp_path / f"cancel{when}.gguf", metadata(), weights(6))
    asked = []
    assert main([str(path), "ab"], cancelled=lambda: asked.append(1) or len(asked) > when) == 130
    out, err = capsys.readouterr()
    assert out == "" and err.endswith("cancelled: stopped before any result\n")


def test_ctrl_c_on_the_command_line_exits_130_saying_so(tmp_path, capsys):
    path = write(tmp_path / "ctrl_c.gguf", metadata(), weights(7))

    def ctrl_c() -> bool:  # Python raises KeyboardInterrupt where the main thread is
        raise KeyboardInterrupt

    try:
        status = main([str(path), "ab"], cancelled=ctrl_c)
    except KeyboardInterrupt:  # uncaught, it would end the whole test session
        pytest.fail("Ctrl+C escaped main: a traceback instead of a message")
    assert status == 130
    out, err = capsys.readouterr()
    assert out == "" and err == "cancelled: stopped before any result\n"
