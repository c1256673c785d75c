"""Desktop app (PyQt6 + pyqtgraph) that renders attention traces; the math lives in scratch."""
