"""Export: PNG without the controls, SVG with sharp heatmap cells, dialogs that keep the folder."""

from __future__ import annotations

import base64
import os
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("PyQt6")
pytest.importorskip("pyqtgraph")

from PyQt6.QtGui import QImage  # noqa: E402

from gui.widgets.heatmap import CRISP_PIXELS  # noqa: E402
from tests.journey_sessions import journey_preset  # noqa: E402

pytestmark = pytest.mark.gui


def test_png_export_leaves_the_controls_out(qtbot, errors, tmp_path, open_window):
    w = open_window(journey_preset(step="weights"))
    assert w.files.export_png(str(tmp_path / "v.png"))
    image = QImage(str(tmp_path / "v.png"))
    content = w.pipeline.content
    assert (image.width(), image.height()) == (content.width(), content.height())
    assert image.height() <= w.pipeline.height() - w.pipeline.controls.height()


def test_svg_export_keeps_heatmap_cells_sharp(qtbot, errors, tmp_path, open_window):
    w = open_window(journey_preset(step="weights"))
    assert w.files.export_svg(str(tmp_path / "v.svg"))
    root = ET.parse(tmp_path / "v.svg").getroot()
    images = [e for e in root.iter() if e.tag.endswith("image")]
    assert images
    sizes = []
    for e in images:
        assert "image-rendering:pixelated" in e.get("style", "")
        href = next(v for k, v in e.attrib.items() if k.endswith("href"))
        data = base64.b64decode(href.split(",", 1)[1])
        picture = QImage.fromData(data)
        sizes.append((picture.width(), picture.height()))
    assert max(sizes) >= (CRISP_PIXELS // 6 * 6, CRISP_PIXELS // 6 * 6)  # 6x6 upsampled
    assert w.pipeline.heatmaps[0].image_item.image.shape == (6, 6)  # the view is restored


def test_file_dialogs_open_in_documents_then_in_the_last_folder(
    qtbot, errors, tmp_path, open_window
):
    w = open_window(journey_preset())
    first = w.files.start_folder()
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert os.path.isdir(first) and os.path.abspath(first) != checkout
    folder = tmp_path / "exports"
    folder.mkdir()
    assert w.files.export_png(str(folder / "v.png"))
    assert w.files.start_folder() == str(folder)
