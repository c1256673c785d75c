"""FixedLines: a text longer than its lines is cut before its result, which stays on screen."""

import pytest

pytest.importorskip("PyQt6")

from gui.widgets.fixed_lines import ELLIPSIS, FixedLines  # noqa: E402

pytestmark = pytest.mark.gui


def test_a_long_sum_is_cut_before_its_result(qtbot):
    """grad_x's hover at 1024 x 700 lost its '= 0.2262' to the cut (the whole is the tooltip)."""
    label = FixedLines(3, 11, mono=True)
    qtbot.addWidget(label)
    label.resize(500, label.height())
    text = "grad_x[0][0] = " + " + ".join(f"0.{n:03d}*0.5" for n in range(80)) + " = 0.2262"
    label.setText(text)
    assert label.text() == text and label.toolTip() == text
    assert ELLIPSIS in label.shown() and label.shown().endswith(" = 0.2262")
    short = "q[0][0] = 1*2 = 2"
    label.setText(short)
    assert label.shown() == short and label.toolTip() == ""
