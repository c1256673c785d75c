"""The command line: `--screenshot` renders offscreen and exits 0; bad names and numbers exit 2."""

from __future__ import annotations

import importlib.util
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("PyQt6")

from gui.state import session as sm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.gui


def run_main(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run main.py with no display and a private HOME (so no user settings are read)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)  # main.py must choose offscreen by itself
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"))
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def load_main():
    """main.py as a module (it is a script beside the packages, not an installed module)."""
    spec = importlib.util.spec_from_file_location("attention_main", ROOT / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG header (after checking the magic bytes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    return struct.unpack(">II", data[16:24])


def test_screenshot_renders_the_preset_at_a_readable_size(tmp_path):
    out = tmp_path / "journey.png"
    done = run_main(
        "--preset", "journey", "--step", "weights", "--screenshot", str(out), tmp_path=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "propagateSizeHints" not in done.stderr  # the offscreen platform's noise, dropped
    width, height = png_size(out)
    assert width >= 1200 and height >= 800
    assert not (tmp_path / "config").exists() or not any((tmp_path / "config").rglob("*.conf"))


@pytest.mark.parametrize(
    ("args", "words", "choice"),
    [
        (("--preset", "no-such-preset"), "unknown preset 'no-such-preset'", "journey"),
        (
            ("--preset", "journey", "--step", "no-such-step"),
            "unknown step 'no-such-step'",
            "weights",
        ),
    ],
)
def test_unknown_names_exit_2_with_a_clear_message(capsys, tmp_path, args, words, choice):
    out = tmp_path / "x.png"
    assert load_main().main([*args, "--screenshot", str(out)]) == 2  # refused before Qt starts
    err = capsys.readouterr().err
    assert words in err and choice in err  # the message lists the choices
    assert not out.exists()


def test_no_display_gives_a_clear_message_not_a_qt_abort(tmp_path):
    done = run_main(tmp_path=tmp_path)
    assert done.returncode == 2
    assert "no display" in done.stderr and "xvfb-run" in done.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--preset", "random", "--heads", "4", "--head", "7"), "--head: expected 0 to 3, all or"),
        (("--preset", "random", "--heads", "4", "--head", "x"), "found 'x'"),
        (("--preset", "journey", "--head", "all"), "--head all: the session has one head"),
        (("--preset", "journey", "--head", "average"), "--head average: the session has one"),
        (("--preset", "journey", "--head", "1"), "--head: expected 0 (the session has 1 head)"),
    ],
)
def test_a_head_the_session_lacks_is_a_usage_error(capsys, tmp_path, args, words):
    out = tmp_path / "x.png"
    assert load_main().main([*args, "--screenshot", str(out)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1  # one clear line
    assert not out.exists()


def test_a_head_the_session_has_is_accepted():
    sys.path.insert(0, str(ROOT))
    from main import check_head

    check_head("3", 4)
    check_head("all", 2)
    check_head(None, 1)
    with pytest.raises(ValueError, match="--head: expected 0 to 3"):
        check_head("4", 4)


def test_a_model_head_and_the_model_view_render_offscreen(tmp_path):
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    text = "Your journey starts with one step"
    for extra in (("--layer", "3", "--head", "7", "--step", "weights"), ("--tab", "model")):
        out = tmp_path / f"{extra[0].strip('-')}.png"
        done = run_main(
            "--model",
            "default",
            "--text",
            text,
            *extra,
            "--screenshot",
            str(out),
            tmp_path=tmp_path,
        )
        if "not installed" in done.stderr:
            pytest.skip("the default model is not installed")
        assert done.returncode == 0, done.stderr
        assert png_size(out) == (1400, 900)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--model", "default", "--layer", "9"), "--layer: expected 0 to 5, found 9"),
        (("--model", "default", "--layer", "1", "--head", "12"), "--head: expected 0 to 11"),
        (("--text", "hi", "--head", "foo"), "--head: with a model, expected a head number 0 to 11"),
        (("--text", "hi", "--head", "all"), "found 'all'"),
        (("--model", "README.md"), "README.md: a file, not a directory (expected a local model"),
        (
            ("--model", "/no/such/dir"),
            "/no/such/dir: not found (expected a local model directory or .gguf file",
        ),
        (("--text", "   "), "text: empty"),
        (
            (
                "--layer",
                "1",
            ),
            "--layer: needs --model",
        ),
    ],
)
def test_bad_model_options_are_usage_errors(capsys, tmp_path, args, words):
    pytest.importorskip("safetensors")
    out = tmp_path / "x.png"
    assert load_main().main([*args, "--screenshot", str(out)]) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--tokens", "0", f"1 to {sm.MAX_TOKENS}"),
        ("--tokens", str(sm.MAX_TOKENS + 1), f"1 to {sm.MAX_TOKENS}"),
        ("--seed", "3000000000", "0 to 2147483647"),
        ("--seed", "-1", "0 to 2147483647"),
        ("--heads", "0", "1 to 16"),
        ("--heads", "17", "1 to 16"),
    ],
)
def test_out_of_range_numbers_are_usage_errors(capsys, option, value, allowed):
    main = load_main()
    with pytest.raises(SystemExit, match="^2$") as exit_info:
        main.parse_args(["--preset", "random", option, value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: expected {allowed}, found {value}" in err, err


def test_the_command_line_limits_are_the_spin_box_limits(qtbot):
    main = load_main()
    top = [str(sm.MAX_SEED), str(sm.MAX_TOKENS), str(sm.MAX_HEADS)]
    args = main.parse_args(["--preset", "random", "--seed", top[0], "--tokens", top[1]])
    assert (args.seed, args.tokens) == (sm.MAX_SEED, sm.MAX_TOKENS)
    assert main.parse_args(["--heads", top[2]]).heads == sm.MAX_HEADS
    from gui.state.app_state import AppState
    from gui.views.inputs_panel import InputsPanel

    panel = InputsPanel(AppState(sm.random_session(0, 4, 4, 2, 2, 1)))
    qtbot.addWidget(panel)
    assert panel.seed.maximum() == sm.MAX_SEED
    assert panel.num_tokens.maximum() == sm.MAX_TOKENS
    assert panel.heads.maximum() == sm.MAX_HEADS


def test_the_backward_view_renders_at_1024x700_and_names_a_bad_step(tmp_path):
    out = tmp_path / "backward.png"
    args = ("--preset", "random", "--tokens", "4", "--heads", "2", "--tab", "backward")
    done = run_main(
        *args, "--grad-output", "target", "--grad-seed", "3", "--step", "grad_scores",
        "--hover", "1,2", "--size", "1024x700", "--screenshot", str(out), tmp_path=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert png_size(out) == (1024, 700)  # nothing in the Backward tab needs a larger window
    bad = run_main(*args, "--step", "scores", "--screenshot", str(out), tmp_path=tmp_path)
    assert bad.returncode == 2 and "unknown step 'scores'; steps: grad_output" in bad.stderr
    wrong = run_main(*args, "--grad-output", "twos", "--screenshot", str(out), tmp_path=tmp_path)
    assert wrong.returncode == 2 and "--grad-output: invalid choice: 'twos'" in wrong.stderr


def test_the_screenshot_deletes_its_window_before_it_returns(qtbot, tmp_path):
    """main.py deletes its window itself, in the GUI thread: left to the interpreter's exit,
    PyQt's cleanup destroyed it while walking its table of wrappers, which the handlers run by
    that destruction could reallocate under the walk (a segfault after the PNG was written)."""
    from PyQt6 import sip
    from PyQt6.QtWidgets import QApplication

    from gui.app.main_window import MainWindow

    main = load_main()
    out = tmp_path / "shot.png"
    args = ["--preset", "random", "--tokens", "4", "--size", "1024x700", "--screenshot", str(out)]
    assert main.main(args) == 0 and png_size(out) == (1024, 700)
    windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)]
    assert all(sip.isdeleted(w) for w in windows), "the screenshot's window outlived it"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--screenshot", "/nonexistent-folder/x.png"), "the folder /nonexistent-folder does not"),
        (("--screenshot", ""), "--screenshot: expected a file name like view.png, found ''"),
        (("--screenshot", "x.jpg"), "--screenshot: expected a .png file"),
        (("--size", "100000x100000", "--screenshot", "x.png"), "--size: expected each side 1 to"),
        (("--size", "0x0", "--screenshot", "x.png"), "--size: expected each side 1 to 8192"),
        (("--size", "800x600"), "--size: only with --screenshot"),
        (("--hover", "1,1"), "--hover: only with --screenshot"),
        (("--hover=-1,2", "--screenshot", "x.png"), "--hover: expected a row and column >= 0"),
        (("--tokens", "64", "--screenshot", "x.png"), "--tokens: set the random example's"),
        (("--preset", "journey", "--seed", "3", "--heads", "2"), "--seed, --heads: set the"),
        (("--grad-seed", "5", "--screenshot", "x.png"), "--grad-seed: read only with --grad-"),
        (("--grad-output", "ones", "--grad-seed", "5"), "--grad-seed: read only with"),
        (("--page", "tiles"), "--page: expected a page of the tab (--tab learn: why, mistakes"),
        (("--tab", "model", "--page", "tiles"), "--tab model: heads, block), found 'tiles'"),
        (("--tab", "learn", "--page", "mistakes", "--mistake", "typo"), "--mistake: expected one"),
        (("--tab", "learn", "--mistake", "no scale"), "--mistake: read only with --tab learn --p"),
        (("--kernel", "tests.kernels_for_checker:scale_1_d"), "--kernel: read only with --tab k"),
        (("--snapshot", "500"), "--snapshot: read only with --run"),
    ],
)
def test_options_that_cannot_work_or_would_be_ignored_are_refused(capsys, args, words):
    """Refused before Qt starts, one line naming the option (no traceback, no window)."""
    assert load_main().main(list(args)) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_a_screenshot_path_that_is_a_folder_is_refused(capsys, tmp_path):
    folder = tmp_path / "shots.png"
    folder.mkdir()
    assert load_main().main(["--screenshot", str(folder)]) == 2
    assert "is a folder; expected a file name" in capsys.readouterr().err


def test_a_hover_outside_the_matrix_is_refused_and_writes_nothing(tmp_path):
    out = tmp_path / "x.png"
    done = run_main("--hover", "99,99", "--screenshot", str(out), tmp_path=tmp_path)
    assert done.returncode == 2
    assert "--hover: expected a cell inside the 6x6 matrix of the weights step" in done.stderr
    assert not out.exists()


def test_a_small_size_reports_the_picture_it_wrote(tmp_path):
    """The window's own minimum size wins over a smaller --size: the line says what was written."""
    out = tmp_path / "x.png"
    done = run_main("--size", "10x10", "--screenshot", str(out), tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    width, height = png_size(out)
    assert width > 10 and f"({width}x{height})" in done.stdout


def test_the_learn_tab_opens_from_the_command_line(tmp_path):
    out = tmp_path / "learn.png"
    done = run_main(
        "--tab", "learn", "--size", "1024x700", "--screenshot", str(out), tmp_path=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert png_size(out) == (1024, 700)


RANDOM_6 = ["--preset", "random", "--seed", "0", "--tokens", "6", "--heads", "1"]


@pytest.mark.parametrize("name", ["none", "causal-top-left", "causal-bottom-right", "window"])
def test_mask_names_one_choice_of_the_variant_box(name):
    """--mask picks the window's one mask choice: none, causal either way, or a variant mask
    with its defaults (the session's variant then computes that mask)."""
    main = load_main()
    s = main.build_session(main.parse_args([*RANDOM_6, "--mask", name]))
    mask, _, align = name.partition("-")
    assert s.variant.mask == mask and (not align or s.variant.align == align)
    shown = s.variant.variant(6, 6, 1)
    expected = {"none": None, "causal": "j <= i", "window": "i - 2 <= j <= i"}[mask]
    assert (shown is None) if expected is None else expected in shown.rule()


def test_an_unknown_or_cell_given_mask_name_is_refused_naming_the_choices():
    main = load_main()
    for name in ("custom", "drawn", "documents", "Window"):
        with pytest.raises(ValueError, match=r"unknown mask .*masks: none, causal-top-left"):
            main.build_session(main.parse_args([*RANDOM_6, "--mask", name]))


def test_decode_opens_the_variant_boxs_decode_step():
    """--decode N: the cache holds tokens 0 .. N-1 and token N-1 is the one query."""
    from gui.state.variant_session import call_sizes

    main = load_main()
    for n in (1, 4, 6):
        s = main.build_session(main.parse_args([*RANDOM_6, "--mask", "window", "--decode", str(n)]))
        assert s.decode == n and call_sizes(s) == (1, n)
        assert s.variant.mask == "window"  # the other options still hold


def test_a_decode_step_past_the_example_is_refused_in_the_sessions_words():
    main = load_main()
    with pytest.raises(ValueError, match=r"--decode 7: decode: expected a cache of 1 to 6 tokens"):
        main.build_session(main.parse_args([*RANDOM_6, "--decode", "7"]))


def saved_training_run(path: Path) -> object:
    """A 4-step induction run of a tiny model, saved where python -m scratch.train --out puts it."""
    from scratch.train import ModelConfig, TrainConfig, Trainer, run_file

    model = ModelConfig(vocab=8, context=7, d_model=4, n_layers=2, n_heads=2)
    run = Trainer(TrainConfig(steps=4, batch=2, snapshot_every=2, model=model)).advance()
    run_file.save(run, path)
    return run


def test_a_training_run_opens_in_the_train_tab(open_window, tmp_path):
    saved = saved_training_run(tmp_path / "run.npz")
    main = load_main()
    args = main.parse_args(["--run", str(tmp_path / "run.npz")])
    main.check_options(args)
    args.train_run = main.training_run(args)
    assert args.tab == "train"  # --run shows the Train tab unless --tab names another
    window = open_window(None, (1024, 700))
    main.open_as_asked(window, args)
    assert window.tabs.currentWidget() is window.train
    assert window.train.run.losses == saved.losses and window.train.run.steps_done == 4


def test_a_training_run_renders_and_a_bad_file_is_a_usage_error(tmp_path):
    saved_training_run(tmp_path / "run.npz")
    out = tmp_path / "train.png"
    done = run_main("--run", str(tmp_path / "run.npz"), "--size", "1024x700", "--screenshot",
                    str(out), tmp_path=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert png_size(out) == (1024, 700)
    empty = tmp_path / "empty.png"  # the Train tab with no run: its hint, no curves
    done = run_main("--tab", "train", "--size", "1024x700", "--screenshot", str(empty),
                    tmp_path=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() != empty.read_bytes()  # the run is drawn
    bad = tmp_path / "bad.png"
    done = run_main("--run", str(ROOT / "README.md"), "--screenshot", str(bad), tmp_path=tmp_path)
    assert done.returncode == 2 and "README.md: not a training run" in done.stderr, done.stderr
    assert not bad.exists()


def opened(main, open_window, argv: list[str]) -> object:
    """The window on screen as main.py opens it with argv (one window per call)."""
    args = main.parse_args(argv)
    main.check_options(args)
    args.train_run = main.training_run(args)
    window = open_window(None, (1024, 700))
    main.open_as_asked(window, args)
    return window


def test_a_page_and_a_mistake_open_as_asked(open_window):
    main = load_main()
    window = opened(main, open_window, ["--tab", "learn", "--page", "tiles"])
    assert window.learn.pages.currentWidget() is window.learn.tiles
    argv = ["--tab", "learn", "--page", "mistakes", "--mistake", "causal off by one"]
    window = opened(main, open_window, argv)
    assert window.learn.pages.currentWidget() is window.learn.mistakes
    assert window.learn.mistakes.current() == "causal off by one"


def test_a_kernel_is_filled_in_and_checked(open_window, qtbot):
    main = load_main()
    argv = ["--tab", "kernel", "--kernel", "tests.kernels_for_checker:scale_1_d"]
    panel = opened(main, open_window, argv).kernel_check
    assert panel.source.text() == "tests.kernels_for_checker:scale_1_d"
    qtbot.waitUntil(lambda: panel.report is not None, timeout=120_000)
    assert "scale 1/d instead of 1/sqrt(d)" in str(panel.report.diagnosis)


@pytest.mark.parametrize(("step", "shown"), [(0, 0), (1, 0), (3, 2), (4, 4), (99, 4)])
def test_a_snapshot_is_the_last_one_at_or_before_the_step(open_window, tmp_path, step, shown):
    saved_training_run(tmp_path / "run.npz")  # snapshots at steps 0, 2 and 4
    main = load_main()
    argv = ["--run", str(tmp_path / "run.npz"), "--snapshot", str(step)]
    window = opened(main, open_window, argv)
    assert window.train.snapshot.step == shown
