"""Settings over :mod:`workstation.config`: one tab per section, a field per setting,
its docstring as the tooltip. Invalid values are named inline; Save writes the file
(most settings apply at the next start; the theme applies at once). The Sandbox tab names
the risk of ``mode = off`` in words, always visible, and in red while it is chosen."""

from __future__ import annotations

import ast
import inspect
import typing
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from workstation.config import Settings, save_settings
from workstation.ui import theme

SECTIONS = ("engine", "fleet", "agent", "telemetry", "ui", "sandbox")
SANDBOX_RISK = (
    "Agents' commands run inside bubblewrap: they see only their own worktree, not your secrets "
    "(~/.ssh, ~/.aws …) or the app's data, and have no network. Where bubblewrap cannot run, each "
    "command waits for your approval and runs nobody watches refuse them. mode = off is a RISK: "
    "commands then run unconfined — they can read and write whatever your user can, ~/.ssh "
    "included, and reach the network — and auto-approved ones run without asking."
)


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings (the string under each field) of a settings class."""
    try:
        tree = ast.parse(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    docs: dict[str, str] = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node, nxt in zip(body, body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[node.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    args = typing.get_args(annotation)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else annotation), True
    return annotation, False


class _Field:
    def __init__(self, name: str, annotation: Any, value: Any, doc: str) -> None:
        self.name = name
        base, self.optional = _unwrap_optional(annotation)
        self.kind = base
        self.widget: QWidget
        if base is bool:
            w = QCheckBox()
            w.setChecked(bool(value))
        elif typing.get_origin(base) is Literal:
            w = QComboBox()
            w.addItems([str(v) for v in typing.get_args(base)])
            w.setCurrentText(str(value))
        elif base is int and not self.optional:
            w = QSpinBox()
            w.setRange(0, 1_000_000)
            w.setValue(int(value))
        elif base is float and not self.optional:
            w = QDoubleSpinBox()
            w.setRange(0.0, 1_000_000.0)
            w.setDecimals(3)
            w.setValue(float(value))
        else:
            w = QLineEdit()
            if isinstance(value, list):
                w.setText(" ".join(str(v) for v in value))
                w.setPlaceholderText("space-separated")
            else:
                w.setText("" if value is None else str(value))
            if self.optional:
                w.setPlaceholderText("not set")
        w.setToolTip(doc)
        self.widget = w

    def value(self) -> Any:
        w = self.widget
        if isinstance(w, QCheckBox):
            return w.isChecked()
        if isinstance(w, QComboBox):
            return w.currentText()
        if isinstance(w, (QSpinBox, QDoubleSpinBox)):
            return w.value()
        assert isinstance(w, QLineEdit)
        text = w.text().strip()
        if typing.get_origin(self.kind) is list:
            return text.split()
        if not text and self.optional:
            return None
        return text


class SettingsDialog(QDialog):
    saved = Signal(object)
    """The new :class:`Settings`."""

    def __init__(self, settings: Settings, parent: QWidget | None = None, *, section: str = "") -> None:
        super().__init__(parent)
        open_section = section
        self.setWindowTitle("Settings")
        self.setModal(True)
        self.setMinimumWidth(560)
        self.settings = settings
        self.fields: dict[str, dict[str, _Field]] = {}
        self.tabs = QTabWidget()
        for section in SECTIONS:
            model: BaseModel = getattr(settings, section)
            cls = type(model)
            docs = field_docs(cls)
            page = QWidget()
            form = QFormLayout(page)
            form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
            section_fields: dict[str, _Field] = {}
            for name, info in cls.model_fields.items():
                f = _Field(name, info.annotation, getattr(model, name), docs.get(name, ""))
                label = QLabel(name.replace("_", " "))
                label.setToolTip(docs.get(name, ""))
                form.addRow(label, f.widget)
                section_fields[name] = f
            self.fields[section] = section_fields
            self.tabs.addTab(page, section.capitalize())
            if section == "sandbox":
                self._add_sandbox_risk(form, section_fields["mode"])
        if open_section in SECTIONS:
            self.tabs.setCurrentIndex(SECTIONS.index(open_section))
        self.error = QLabel("")
        self.error.setWordWrap(True)
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        self.error.setStyleSheet(f"color: {theme.RED.name()};")
        self.error.hide()
        note = QLabel(f"Saved to {settings.settings_file.name} in the data folder; "
                      "engine and fleet changes apply at the next start.")
        note.setWordWrap(True)
        note.setForegroundRole(note.foregroundRole().PlaceholderText)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._save)
        buttons.rejected.connect(self.reject)
        self.buttons = buttons
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addWidget(self.error)
        layout.addWidget(note)
        layout.addWidget(buttons)

    def _add_sandbox_risk(self, form: QFormLayout, mode: _Field) -> None:
        self.sandbox_risk = QLabel(SANDBOX_RISK)
        self.sandbox_risk.setWordWrap(True)
        self.sandbox_risk.setTextFormat(Qt.TextFormat.PlainText)
        form.insertRow(0, self.sandbox_risk)
        combo = mode.widget
        assert isinstance(combo, QComboBox)

        def mark(text: str) -> None:
            self.sandbox_risk.setStyleSheet(f"color: {theme.RED.name()}; font-weight: bold;" if text == "off" else "")

        combo.currentTextChanged.connect(mark)
        mark(combo.currentText())

    def values(self) -> dict[str, Any]:
        data = self.settings.model_dump(mode="python", exclude={"data_dir"})
        for section, fields in self.fields.items():
            for name, f in fields.items():
                data[section][name] = f.value()
        return data

    def build(self) -> Settings:
        """The edited settings, validated (raises ``ValidationError``)."""
        data = self.values()
        sections = {name: type(getattr(self.settings, name)).model_validate(data[name]) for name in SECTIONS}
        return self.settings.model_copy(update=sections)

    def _save(self) -> None:
        try:
            new = self.build()
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            self.error.setText(f"{where}: {first.get('msg')}")
            self.error.show()
            return
        save_settings(new)
        if new.ui.theme != self.settings.ui.theme:
            app = QApplication.instance()
            if app is not None:
                theme.apply_theme(app, new.ui.theme)
        self.settings = new
        self.saved.emit(new)
        self.accept()

