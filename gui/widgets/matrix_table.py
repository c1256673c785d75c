"""Editable matrix table: refuses anything that is not a finite number and marks the cell."""

from __future__ import annotations

import math

from PyQt6.QtCore import QAbstractTableModel, QModelIndex, QObject, Qt, pyqtSignal
from PyQt6.QtGui import QColor
from PyQt6.QtWidgets import QHeaderView, QTableView, QWidget

from gui.present import numbers

BAD_CELL = QColor(255, 190, 190)


def parse_cell(text: object) -> float:
    """A finite float from what the user typed; ValueError says why not."""
    if isinstance(text, bool):
        raise ValueError(f"expected a finite number, found {text!r}")
    try:
        value = float(str(text).strip().replace("\u2212", "-"))
    except ValueError:
        raise ValueError(f"expected a finite number, found {str(text)!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, found {str(text)!r}")
    return value


class MatrixModel(QAbstractTableModel):
    """Holds one matrix as lists of floats; setData validates, bad cells are remembered."""

    cellEdited = pyqtSignal(int, int, float)
    rejected = pyqtSignal(str)

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.title = name  # what a refusal calls the table: its tab's title ('X (q = k = v)')
        self.values: list[list[float]] = []
        self.row_labels: list[str] = []
        self.bad: set[tuple[int, int]] = set()

    def set_matrix(self, values, row_labels: list[str] | None = None) -> None:
        """Replace the whole matrix (clears the marks)."""
        self.beginResetModel()
        self.values = [list(r) for r in values]
        self.row_labels = list(row_labels or [])
        self.bad = set()
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: B008 - Qt signature
        return 0 if parent.isValid() else len(self.values)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: B008 - Qt signature
        return 0 if parent.isValid() or not self.values else len(self.values[0])

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        i, j = index.row(), index.column()
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            return numbers.significant(
                self.values[i][j], 6
            )  # a string, so the editor accepts any text
        if role == Qt.ItemDataRole.BackgroundRole and (i, j) in self.bad:
            return BAD_CELL
        if role == Qt.ItemDataRole.ToolTipRole and (i, j) in self.bad:
            return "refused: not a finite number (the last good value is kept)"
        return None

    def headerData(self, section: int, orientation, role: int = Qt.ItemDataRole.DisplayRole):
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        if orientation == Qt.Orientation.Vertical and section < len(self.row_labels):
            return f"{section} {self.row_labels[section]}"
        return str(section)

    def flags(self, index: QModelIndex):
        return super().flags(index) | Qt.ItemFlag.ItemIsEditable

    def setData(self, index: QModelIndex, value, role: int = Qt.ItemDataRole.EditRole) -> bool:
        """Accept finite numbers only; otherwise mark the cell and keep the old value."""
        if role != Qt.ItemDataRole.EditRole or not index.isValid():
            return False
        i, j = index.row(), index.column()
        try:
            number = parse_cell(value)
        except ValueError as exc:
            self.bad.add((i, j))
            self.dataChanged.emit(index, index)
            kept = self.values[i][j]
            self.rejected.emit(
                f"refused {self.title}[{i}][{j}]: {exc}; kept {numbers.significant(kept, 6)}"
            )
            return False
        self.bad.discard((i, j))
        self.values[i][j] = number
        self.dataChanged.emit(index, index)
        self.cellEdited.emit(i, j, number)
        return True


class MatrixTable(QTableView):
    """A table view over a MatrixModel for one input matrix (x, w_q, ...)."""

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.matrix_model = MatrixModel(name, self)  # dies with its table, in the GUI thread
        self.setModel(self.matrix_model)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.horizontalHeader().setDefaultSectionSize(58)
        self.verticalHeader().setDefaultSectionSize(22)
        self.setMinimumHeight(120)
