"""Variant picker: mask rule and alignment, score changes, learned sinks, RoPE, decode step.

Shows a session's variant (set_session, silently) and says what the user asked for: `edited`
with the picker's fields (combo keys, check boxes, texts as typed; gui/state/variant_session.py
reads
them) and `decodeChanged` with the decode step (0: off). The masks, their rows and tips come
from scratch's registry of masks (VariantChoice.mask_labels, mask_params): a mask file there is
a row here. The rule in words comes from scratch through variant_session; nothing here knows
what a window or a softcap computes.
"""

from __future__ import annotations

from PyQt6.QtCore import Qt, pyqtSignal
from PyQt6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QPushButton,
    QSlider,
    QWidget,
)

from gui.state import variant_session
from gui.state.session import Session
from gui.widgets import controls
from scratch.variants import VariantChoice

ALIGN_LABELS = {"bottom-right": "bottom-right", "top-left": "top-left"}
ROPE_LABELS = {"none": "none", "half": "half (Llama)", "interleaved": "interleaved (GPT-J)"}
TIPS = {  # the score changes' boxes (each mask parameter's tip is its Param's words)
    "softcap": "cap > 0: score -> cap * tanh(score / cap), before ALiBi",
    "slopes": "one slope per head, comma-separated; empty: the paper's slopes",
    "sinks": "one sink logit per head, comma-separated: exp(sink) joins each row's denominator",
    "rope_base": "RoPE's base (angles position * base^(-2k / d))",
}


def _edit(tip: str, width: int = 0) -> QLineEdit:
    edit = QLineEdit()
    edit.setToolTip(tip)
    if width:
        edit.setMaximumWidth(width)
    return edit


class VariantPanel(QGroupBox):
    """The variant of a session as widgets; emits edited(fields) and decodeChanged(n)."""

    edited = pyqtSignal(object)
    decodeChanged = pyqtSignal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Variant", parent)
        self._updating = False
        self.form = QFormLayout(self)
        self.form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.mask = controls.combo(
            VariantChoice.mask_labels(),
            "the call's one mask: SDPA's is_causal is causal top-left, its attn_mask a drawn "
            "grid; click the grid below to draw your own",
        )
        self.align = controls.combo(
            ALIGN_LABELS,
            "where the queries sit among the keys, for the mask and ALiBi (decode: bottom-right); "
            "RoPE always turns a query by its true position",
        )
        self.form.addRow("mask", self.mask)
        self.form.addRow("aligned", self.align)
        self.params = VariantChoice.mask_params()  # one row per mask parameter
        self.texts = {key: _edit(p.words, 0 if p.is_list else 64) for key, p in self.params.items()}
        self.texts.update(
            (name, _edit(tip, 64 if name not in ("slopes", "sinks") else 0))
            for name, tip in TIPS.items()
        )
        t = self.texts
        for key, p in self.params.items():
            self.form.addRow(p.label, t[key])
        self.softcap_on = QCheckBox("softcap")
        self.alibi = QCheckBox("ALiBi")
        self.sinks_on = QCheckBox("learned sinks")
        # the cap beside its box, not pushed to the far side
        self.form.addRow(controls.row(self.softcap_on, t["softcap"], 1))
        self.form.addRow(controls.row(self.alibi, t["slopes"]))
        t["slopes"].setPlaceholderText("paper's slopes")
        self.form.addRow(controls.row(self.sinks_on, t["sinks"]))
        self.rope = controls.combo(ROPE_LABELS)
        self.form.addRow("RoPE", controls.row(self.rope, "base", t["rope_base"]))
        # the variant's rule in words, from scratch: the inputs panel shows it under the mask
        self.rule = controls.label(selectable=True)
        # decode: the cache grows one token at a time; the newest token's row is computed
        self.decode_on = QCheckBox("decode")
        self.decode_on.setToolTip("one query (the newest token) against the cached tokens")
        self.decode = QSlider(Qt.Orientation.Horizontal)
        self.decode.setMinimum(1)
        self.decode.setPageStep(1)
        self.grow = QPushButton("+1 token")
        self.cache = QLabel()
        self.form.addRow(controls.row(self.decode_on, self.decode, self.grow))
        self.form.addRow(self.cache)
        for w in (self.decode, self.grow, self.decode_on):
            w.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # Left/Right stay the pipeline's
        self._connect()

    def _connect(self) -> None:
        for box in (self.mask, self.align, self.rope):
            box.activated.connect(lambda _: self._edited())
        for check in (self.softcap_on, self.alibi, self.sinks_on):
            check.clicked.connect(lambda _: self._edited())
        for edit in self.texts.values():
            edit.editingFinished.connect(self._edited)
        self.decode_on.clicked.connect(lambda on: self._decode(self.decode.maximum() if on else 0))
        self.decode.valueChanged.connect(
            lambda n: self._decode(n) if self.decode_on.isChecked() else None
        )
        self.grow.clicked.connect(
            lambda: self._decode(min(self.decode.value() + 1, self.decode.maximum()))
        )

    def fields(self) -> dict[str, object]:
        """What the picker shows: combo keys, check boxes and texts as typed."""
        fields = {name: edit.text() for name, edit in self.texts.items()}
        fields.update(
            mask=self.mask.currentData(),
            align=self.align.currentData(),
            rope=self.rope.currentData(),
            softcap_on=self.softcap_on.isChecked(),
            alibi=self.alibi.isChecked(),
            sinks_on=self.sinks_on.isChecked(),
        )
        return fields

    def _edited(self) -> None:
        if not self._updating:
            self.edited.emit(self.fields())

    def _decode(self, n: int) -> None:
        if not self._updating:
            self.decodeChanged.emit(n)

    def _cap_typed(self) -> str:
        """The softcap box's text, or 30 when it is empty (a cap to start from)."""
        return self.texts["softcap"].text().strip() or "30"

    def set_session(self, s: Session) -> None:
        """Show the session's variant and decode step without emitting anything."""
        v = s.variant
        self._updating = True
        try:
            for box, key in ((self.mask, v.mask), (self.align, v.align), (self.rope, v.rope)):
                box.setCurrentIndex(max(box.findData(key), 0))
            texts = {
                key: p.text(getattr(v, key)) or p.blank.format(tokens=s.num_tokens)
                for key, p in self.params.items()
            }
            texts.update({
                "rope_base": f"{v.rope_base:g}",
                # unticked: the cap typed last stays in its box for the next tick
                "softcap": f"{v.softcap:g}" if v.softcap is not None else self._cap_typed(),
                "slopes": ", ".join(f"{x:g}" for x in v.slopes),
                "sinks": ", ".join(f"{x:g}" for x in v.sinks) or ", ".join(["0"] * s.num_heads),
            })  # fmt: skip
            for name, text in texts.items():
                self.texts[name].setText(str(text))
            self.softcap_on.setChecked(v.softcap is not None)
            self.alibi.setChecked(v.alibi)
            self.sinks_on.setChecked(bool(v.sinks))
            shown = v.mask_fields(v.mask)
            for key in self.params:
                self.form.setRowVisible(self.texts[key], key in shown)
            self.rule.setText(variant_session.rule(s) or "no variant: plain attention")
            self.decode.setMaximum(s.num_tokens)
            self.decode.setValue(s.decode or s.num_tokens)
            self.decode_on.setChecked(bool(s.decode))
            self.decode.setEnabled(bool(s.decode))
            self.grow.setEnabled(bool(s.decode) and s.decode < s.num_tokens)
            self.cache.setText(
                f"decode: token {s.decode - 1} queries the {s.decode} cached tokens"
                if s.decode
                else "decode off: every token queries"
            )
        finally:
            self._updating = False
