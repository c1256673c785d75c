"""The Model tab with a Qwen2 file (a tiny random one written by tests/test_models_qwen2.py's
writer) at 1024 x 700: its note names the q bias, and the head view fits in its box (a wrapped
note took the room the lines needed, which cut their bottom off)."""

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("gguf")

from gui.state import session as sm  # noqa: E402
from gui.work.model_worker import frame  # noqa: E402
from scratch import models  # noqa: E402
from scratch.models import decoding  # noqa: E402
from tests.test_models_gguf import write  # noqa: E402
from tests.test_models_qwen2 import TEXT, metadata, weights  # noqa: E402

pytestmark = pytest.mark.gui


@pytest.mark.parametrize("head", [None, 3])  # every head's lines, then one head's
def test_a_qwen2_in_the_model_tab_at_1024_by_700_cuts_nothing_off(
    qtbot, open_window, tmp_path, head
):
    path = write(tmp_path / "qwen2.gguf", metadata(), weights(0, tied=True), arch="qwen2")
    w = open_window(sm.random_session(0, 4, 4, 2, 2, 1), size=(1024, 700))
    w.tabs.setCurrentWidget(w.model)
    panel = w.model
    panel.show_result(frame(decoding.start(models.load(path), TEXT)))
    panel.head.setCurrentIndex(panel.head.findData(-1 if head is None else head))
    qtbot.wait(20)
    assert "q = x @ W_q + b_q, then RoPE" in panel.head_note.text()
    box = panel.lines.parentWidget()  # the picker row, the note and the head view
    for part in (panel.head_note, panel.lines):
        assert part.isVisible() and part.geometry().bottom() <= box.height() - 1, part
    bottom = box.mapTo(w, box.rect().bottomLeft()).y()
    assert bottom <= panel.views.mapTo(w, panel.views.rect().bottomLeft()).y()
