"""Desktop app: `python main.py`, or render one view to a PNG with --screenshot."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable

from gui.app.command_line import PAGES, check_head, check_options, parse_args


def training_run(args: argparse.Namespace) -> object:
    """The --run file's training run, or None; ValueError naming the file and why when it is
    not one. With --run and no --tab the Train tab is the one shown."""
    if args.run is None:
        return None
    from scratch.train import run_file

    found = run_file.load(args.run)
    args.tab = args.tab or "train"
    return found


def fail(message: str) -> int:
    """Print a clear message and return the usage-error status."""
    print(f"main.py: error: {message}", file=sys.stderr)
    return 2


def model_run(args: argparse.Namespace):
    """What --model/--text ask the Model tab to show, or None: a Run, or for a decoder a
    DecoderFrame (after --generate N tokens); ValueError with a clear message."""
    if args.model is None and args.text is None:
        for flag, value in (("--layer", args.layer), ("--generate", args.generate)):
            if value is not None:
                raise ValueError(f"{flag}: needs --model (or --text)")
        return None
    from gui.state.model_session import start_model
    from gui.views.model_panel import DEFAULT_TEXT

    path = None if args.model in (None, "default") else args.model
    try:
        shown = start_model(path, args.text if args.text is not None else DEFAULT_TEXT)
    except ImportError as exc:
        raise ValueError(f"--model: real models need {exc.name}; run make run once") from exc
    decoder = hasattr(shown, "extend")
    if args.generate is not None and not decoder:
        raise ValueError(f"--generate: {shown.model.name} is not a decoder; try --model smollm2")
    if decoder:
        from gui.work.model_worker import frame

        for _ in range(args.generate or 0):
            shown = shown.extend()
        shown = frame(shown)
    if args.head is not None and not args.head.isdigit():
        heads = model_of(shown).config.heads
        raise ValueError(f"--head: with a model, expected a head number 0 to {heads - 1}, "
                         f"found {args.head!r}")  # fmt: skip
    if args.layer is not None or args.head is not None:
        layer = 0 if args.layer is None else args.layer
        head = 0 if args.head is None else int(args.head)
        try:
            model_of(shown).check_head(layer, head)
        except ValueError as exc:  # "layer: expected 0 to 5, found 9" -> "--layer: ..."
            raise ValueError(f"--{exc}") from None
    return shown


def model_of(shown) -> object:
    """The model of a Run or a DecoderFrame."""
    return shown.decoding.prompt.model if hasattr(shown, "decoding") else shown.model


def build_session(args: argparse.Namespace, run=None):
    """The session the options ask for (None: the window chooses); ValueError on bad names."""
    from gui.state import session as sm
    from gui.state.app_state import backend_dtypes
    from gui.state.variant_session import mask_names, with_decode, with_mask_mode
    from scratch.learn import presets

    s = None
    if run is not None and (args.layer is not None or args.head is not None):
        from gui.state.model_session import head_session

        head = int(args.head) if args.head is not None and args.head.isdigit() else 0
        whole = run.decoding.run() if hasattr(run, "decoding") else run  # every token so far
        s = head_session(whole, 0 if args.layer is None else args.layer, head)
    if args.preset == "random":
        s = sm.random_session(args.seed, args.tokens, 8, 4, 4, args.heads)
    elif args.preset is not None and s is None:
        names = presets.names()
        if args.preset not in names:
            raise ValueError(f"unknown preset {args.preset!r}; presets: random, {', '.join(names)}")
        s = sm.from_preset(presets.get(args.preset))
    changes = {}
    if args.backend is not None or args.dtype is not None:
        backends = backend_dtypes()
        backend = args.backend or "scratch"
        if backend not in backends:
            raise ValueError(f"unknown backend {backend!r}; available: {', '.join(backends)}")
        dtype = args.dtype or backends[backend][0]
        if dtype not in backends[backend]:
            raise ValueError(f"{backend} has no dtype {dtype!r}; it has {backends[backend]}")
        changes.update(backend=backend, dtype=dtype)
    if args.grad_output is not None:
        changes.update(grad_output=args.grad_output, grad_seed=args.grad_seed)
    if args.mask is not None and args.mask not in mask_names():
        raise ValueError(f"unknown mask {args.mask!r}; masks: {', '.join(mask_names())}")
    if changes or args.mask is not None or args.decode is not None:
        from gui.app.main_window import default_session

        s = dataclasses.replace(s or default_session(), **changes)
    if args.mask is not None:
        s = dataclasses.replace(s, variant=with_mask_mode(s.variant, args.mask))
    if args.decode is not None:
        try:
            s = with_decode(s, args.decode)
        except ValueError as exc:  # the session's own words, under the option's name
            raise ValueError(f"--decode {args.decode}: {exc}") from None
    return s


def screenshot(args: argparse.Namespace, session, run=None) -> int:
    """Render the window offscreen, open the asked step, save a PNG; 0 on success."""
    from PyQt6.QtCore import QSettings
    from PyQt6.QtWidgets import QApplication

    from gui.app.main_window import MainWindow, default_session
    from gui.work.collector import own_collection

    width, height = args.size  # check_options parsed it
    quiet_offscreen_warnings()
    app = QApplication.instance() or QApplication([sys.argv[0]])
    own_collection(app)
    folder = tempfile.TemporaryDirectory(prefix="attention-settings-")  # never the user's
    settings = QSettings(os.path.join(folder.name, "settings.ini"), QSettings.Format.IniFormat)
    session = session or default_session()
    if args.step:
        session = dataclasses.replace(session, step=args.step)
    window = MainWindow(settings, session, dialogs=False)
    try:
        return _render_window(args, app, window, run, session, width, height)
    finally:
        window.close()  # joins its workers
        _delete_now(app, window)
        folder.cleanup()


def quiet_offscreen_warnings() -> None:
    """Drop Qt's "This plugin does not support propagateSizeHints()": the offscreen platform
    says it for every window, and it is not about anything the user did; others pass."""
    from PyQt6.QtCore import QtMsgType, qInstallMessageHandler

    def handler(kind, context, message: str) -> None:
        if "propagateSizeHints" in message:
            return
        label = {QtMsgType.QtWarningMsg: "warning", QtMsgType.QtCriticalMsg: "critical",
                 QtMsgType.QtFatalMsg: "fatal"}.get(kind, "info")  # fmt: skip
        print(f"Qt {label}: {message}", file=sys.stderr)

    qInstallMessageHandler(handler)


def _delete_now(app, window) -> None:
    """Delete the window here, in the GUI thread, while Python and Qt are whole.

    Left to the interpreter's exit, PyQt's cleanup destroys it while walking its table of
    wrappers, and the Python handlers that destruction runs (pyqtgraph's, ours) can add
    wrappers and so reallocate that table under the walk: main.py segfaulted after writing
    the PNG (its cores: sip_api_visit_wrappers, called by cleanup_on_exit, reading freed
    memory where a table entry was), which failed test_gui_cli now and then under load."""
    from PyQt6.QtCore import QEvent

    window.deleteLater()
    app.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def _render_window(args: argparse.Namespace, app, window, run, session, width, height) -> int:
    """Show the window, open the asked tab, step and cell, write the PNG; 0 on success."""
    from gui.widgets import export

    open_runs(window, args, run)
    if run is not None and session is not None and args.layer is not None:
        window.model.layer.setValue(args.layer)  # the head view's and the Whole block's layer
        window.model.grid.select(args.layer, int(args.head) if args.head else 0)
    window.resize(width, height)
    window.show()
    failed: list[str] = []
    window.worker.failed.connect(failed.append)
    if not _waited(app, lambda: (window.worker.busy or window.outcome is None) and not failed):
        return fail("the trace took longer than 120 s")
    if failed:
        print(f"main.py: the trace failed: {failed[0]}", file=sys.stderr)
        return 1
    window.tabs.setCurrentWidget(tab_of(window, args))  # the Backward tab starts its computation
    open_page(window, args)
    pipeline = window.pipeline
    if args.tab == "backward":
        if not _waited(app, lambda: window.backward_worker.busy or window.backward_outcome is None):
            return fail("the backward pass took longer than 120 s")
        pipeline = window.backward.pipeline
    names = pipeline.names()
    if args.step and args.step not in names:
        return fail(f"unknown step {args.step!r}; steps: {', '.join(names)}")
    if args.step and args.step in names:
        pipeline.set_step(args.step)
    if args.head is not None and run is None:
        pipeline.set_head(args.head)
    for _ in range(5):
        app.processEvents()
    if args.hover:
        row, col = args.hover  # check_options parsed it
        shape = pipeline.heatmaps[0].panel.shape if pipeline.heatmaps[0].panel else (0, 0)
        if not (row < shape[0] and col < shape[1]):
            return fail(
                f"--hover: expected a cell inside the {shape[0]}x{shape[1]} matrix of the "
                f"{pipeline.step_name} step, found {row},{col}"
            )
        pipeline.hover_cell(row, col)
        app.processEvents()
    if not _waited(app, lambda: any(w.busy for w in workers(window))):
        return fail("the tab's work took longer than 120 s")
    for _ in range(5):  # the results' layout settles (a page's boxes resize to their pictures)
        app.processEvents()
    export.atomic.write_bytes(args.screenshot, export.widget_png(window))
    print(f"wrote {args.screenshot} ({window.width()}x{window.height()})")
    return 0


def _waited(app, busy: Callable[[], bool], seconds: float = 120) -> bool:
    """Handle events while busy(); False when it still was after `seconds`."""
    deadline = time.monotonic() + seconds
    while busy():
        app.processEvents()
        time.sleep(0.01)
        if time.monotonic() > deadline:
            return False
    return True


def tab_of(window, args: argparse.Namespace):
    """The tab --tab names (the Pipeline without --tab), on screen or in --screenshot."""
    return window.pages[args.tab or "pipeline"]


def open_page(window, args: argparse.Namespace) -> None:
    """The --page inside the tab, and the --kernel filled in and checked."""
    if args.page is not None:
        pages = window.learn.pages if args.tab == "learn" else window.model.views
        pages.setCurrentIndex(PAGES[args.tab].index(args.page))
    if args.mistake is not None:
        from scratch.learn.mistakes import NAMES

        window.learn.mistakes.names.setCurrentRow(NAMES.index(args.mistake))
    if args.kernel is not None:
        panel = window.kernel_check
        source, _, function = args.kernel.rpartition(":") if ".py:" in args.kernel else (
            args.kernel, "", "")  # fmt: skip
        panel.source.setText(source)
        panel.function.setText(function)
        panel.start()


def workers(window) -> list:
    """Every worker of the window (the objects with a `busy` flag): the pages' own work."""
    from PyQt6.QtCore import QObject

    return [w for w in window.findChildren(QObject) if isinstance(getattr(w, "busy", None), bool)]


def open_runs(window, args: argparse.Namespace, run=None) -> None:
    """The --run file's training run in the Train tab, the model's run in the Model tab."""
    if args.train_run is not None:
        window.train.open_run(args.train_run)
        if args.snapshot is not None:  # every run has its snapshot at step 0
            run_ = args.train_run
            window.train.scrubber.setValue(run_.snapshots.index(run_.snapshot_at(args.snapshot)))
    if run is not None:
        window.model.show_result(run, args.model or "default")


def open_as_asked(window, args: argparse.Namespace, run=None) -> None:
    """The window on screen opens what the options ask: the runs, --step, --head, --tab."""
    open_runs(window, args, run)
    if args.step:
        window.pipeline.step_name = args.step
    if args.head is not None and run is None:  # a model's head is the session's one head
        window.pipeline.set_head(args.head)
    window.tabs.setCurrentWidget(tab_of(window, args))
    open_page(window, args)


def no_screen() -> bool:
    """True on Linux with no X11/Wayland display and no Qt platform chosen by hand."""
    return (
        sys.platform.startswith("linux")
        and not os.environ.get("DISPLAY")
        and not os.environ.get("WAYLAND_DISPLAY")
        and not os.environ.get("QT_QPA_PLATFORM")
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse options, then the screenshot path or the interactive window."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    args = parse_args(argv)
    if args.generate is not None and args.tab is None and args.layer is None and args.head is None:
        args.tab = "model"  # the generation is what --generate asks to see (not a head of it)
    if args.list_presets:
        from scratch.learn import presets

        print("\n".join(["random", *presets.names()]))
        return 0
    if args.screenshot and no_screen():
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    try:
        check_options(args)
        args.train_run = training_run(args)  # read by the window on screen or in a picture
        run = model_run(args)
        session = build_session(args, run)
        if args.head is not None and run is None:  # a model's head was checked by model_run
            from gui.app.main_window import default_session

            check_head(args.head, (session or default_session()).num_heads)
    except ValueError as exc:
        return fail(str(exc))
    if args.step and args.tab != "backward":  # check the step name before starting Qt
        from gui.app.main_window import default_session
        from gui.state import controller

        try:
            names = controller.step_names(session or default_session())
        except (ValueError, TypeError) as exc:
            return fail(f"the inputs are not valid: {exc}")
        if args.step not in names:
            return fail(f"unknown step {args.step!r}; steps: {', '.join(names)}")
    if args.screenshot:
        return screenshot(args, session, run)
    if no_screen():
        return fail(
            "no display to open a window on (DISPLAY and WAYLAND_DISPLAY are unset). Run it "
            "under a virtual screen: xvfb-run -s '-screen 0 1600x1000x24' python main.py "
            "(Debian: apt-get install xvfb libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1), or "
            "render a picture with --screenshot FILE.png"
        )
    import logging

    from PyQt6.QtCore import QSettings
    from PyQt6.QtWidgets import QApplication

    from gui.app.main_window import MainWindow
    from gui.widgets.errors import ErrorHandler
    from gui.work.collector import own_collection

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if os.environ.get("QT_QPA_PLATFORM") == "offscreen":  # e.g. a smoke run of make run
        quiet_offscreen_warnings()
    app = QApplication(sys.argv)
    own_collection(app)
    ErrorHandler(show_dialog=True).install()
    settings = QSettings("scratch-attention", "attention-app")
    window = MainWindow(settings, session)
    open_as_asked(window, args, run)
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
