"""Issue 23's small items: --tab opens that tab on screen too, a refused cell names the table the
user sees, '1 token' in the singular, and the no-display hint names every library Qt needs."""

import argparse
import os
import subprocess
import sys

import pytest

from gui.present import numbers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_counts_say_token_in_the_singular_for_one():
    assert [numbers.count(n, "token") for n in (0, 1, 2, 13)] == [
        "0 tokens",
        "1 token",
        "2 tokens",
        "13 tokens",
    ]


def test_the_no_display_hint_names_libxcb_cursor0(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)
    env.update(HOME=str(tmp_path), PYTHONPATH=ROOT)
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "main.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    for package in ("xvfb", "libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1"):
        assert package in done.stderr, (package, done.stderr)


def test_help_text(capsys):
    import main

    with pytest.raises(SystemExit):
        main.parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "only with --screenshot: hover this cell" in out
    assert "only with --screenshot: the window's size" in out
    assert "kernel" in out  # --tab kernel: the Check a kernel tab
    assert "open the window on screen as they open a --screenshot" in out
    assert "only --hover and --size need --screenshot" in out


@pytest.mark.gui
def test_tab_opens_the_named_tab_on_screen_too(open_window):
    pytest.importorskip("PyQt6")
    import main
    from gui.state import session as sm

    w = open_window(sm.random_session(0, 4, 4, 2, 2, 1))
    for name, widget in (
        (None, w.pipeline),
        ("model", w.model),
        ("kernel", w.kernel_check),
        ("check", w.checks),
    ):
        assert main.tab_of(w, argparse.Namespace(tab=name)) is widget
    source = open(os.path.join(ROOT, "main.py")).read()
    interactive = source[source.index("window = MainWindow(settings, session)") :]
    assert "open_as_asked(window, args, run)" in interactive  # on screen: --tab too
    assert "tab_of(window, args)" in source[source.index("def open_as_asked") :]


@pytest.mark.gui
def test_a_refused_cell_names_the_table_the_user_sees(open_window, qtbot):
    pytest.importorskip("PyQt6")
    from gui.state import session as sm
    from gui.state.input_modes import with_mode
    from gui.views.inputs_panel import TABLE_TITLES

    s = sm.random_session(0, 4, 4, 2, 2, 1)
    w = open_window(s)
    said = []
    w.inputs.refused.connect(said.append)
    w.inputs._apply(with_mode, "self")
    assert w.inputs.session.mode == "self"
    w.inputs._on_cell("query", 0, 1, float("nan"))
    title = TABLE_TITLES["self"]["query"]
    assert said and f"{title}[0][1]" in said[-1], said
    assert "query[0][1]" not in said[-1]
