"""The decoder's controls: Generate one token, greedy or seeded sampling, newest row only."""

from __future__ import annotations

from PyQt6.QtCore import pyqtSignal
from PyQt6.QtWidgets import QCheckBox, QPushButton, QWidget

from gui.widgets import controls
from gui.widgets.spin_boxes import DoubleSpinBox, SpinBox

MAX_SEED = 2**31 - 1


class GenerateBar(QWidget):
    """Emits generate(temperature, seed): temperature 0 is greedy (seed None), above 0 a
    seeded draw; newestToggled(bool) switches the grid to each head's newest row."""

    generate = pyqtSignal(float, object)  # temperature, seed (None when greedy)
    newestToggled = pyqtSignal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.button = QPushButton("Generate next token")
        self.button.setToolTip("Feed the chosen token to the model: the KV cache grows by one")
        self.temperature = DoubleSpinBox(
            0.0, 5.0, "0: greedy (the likeliest token); above 0: a seeded draw"
        )
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(2)
        self.seed = SpinBox(
            0, MAX_SEED, "seed of the draw (step n draws with the generator seeded (seed, n))"
        )
        self.newest = QCheckBox("newest row only")
        self.newest.setToolTip("each head shows only what the newest token attends to")
        self.cache = controls.label()  # never widens the tab past a 1024-pixel window
        items = (self.button, "temperature", self.temperature, "seed", self.seed, self.newest)
        self.setLayout(controls.row(*items, (self.cache, 1), margins=(0, 0, 0, 0)))
        self.button.clicked.connect(self._clicked)
        self.newest.toggled.connect(self.newestToggled)
        self.temperature.valueChanged.connect(lambda t: self.seed.setEnabled(t > 0))
        self.seed.setEnabled(False)

    def _clicked(self) -> None:
        t = float(self.temperature.value())
        self.generate.emit(t, int(self.seed.value()) if t > 0 else None)
