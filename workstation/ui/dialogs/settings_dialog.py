"""Settings over :mod:`workstation.config`, grouped for people rather than by the schema:
Engine, Sessions, Sandbox, Costs, Display, and Advanced for the rest. Each field has a
label in words with its unit and its help text under it (the setting's docstring; all of
it in the tooltip). Invalid values are named inline; Save writes the file (most settings
apply at the next start; the theme applies at once). The Sandbox tab names the risk of
``mode = off`` in words, always visible, and in red while it is chosen. The Costs tab offers
the typical rental price of this machine's GPU model per GPU-hour when none is set."""

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
from workstation.core.gpu_prices import typical_gpu_hourly_usd
from workstation.ui import theme

SECTIONS = ("engine", "fleet", "agent", "telemetry", "ui", "sandbox")

GROUPS: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    ("Engine", (
        ("engine", "model", "Model"),
        ("engine", "profile", "Tuning profile"),
        ("engine", "kv_cache_gib", "KV cache (GiB)"),
        ("engine", "start_timeout_s", "Start timeout (s)"),
        ("engine", "external_url", "Outside endpoint URL"),
        ("engine", "external_api_key", "Outside endpoint key"),
        ("engine", "external_model", "Outside endpoint model"),
        ("engine", "lora_dir", "LoRA adapters folder"),
        ("engine", "replicas", "Engines of the model (0: one per GPU group)"),
        ("engine", "gpus_per_engine", "GPUs per engine (tensor-parallel)"),
    )),
    ("Sessions", (
        ("fleet", "max_generating", "Sessions generating at once"),
        ("fleet", "admission", "Admission (adaptive: by what the engine reports)"),
        ("fleet", "ttft_target_s", "First-token target, p95 (s)"),
        ("fleet", "setup_timeout_s", "Worktree setup timeout (s)"),
        ("fleet", "setups_at_once", "Setups at once"),
        ("agent", "rules", "Rules files"),
        ("agent", "mcp_config", "MCP servers file"),
        ("agent", "model_takes_images", "Model takes images"),
    )),
    ("Sandbox", (
        ("sandbox", "mode", "Confinement"),
        ("sandbox", "network", "Network for commands"),
        ("sandbox", "cpu_time_s", "CPU time per command (s)"),
        ("sandbox", "address_space_gib", "Memory per command (GiB)"),
        ("sandbox", "max_processes", "Processes per command"),
        ("sandbox", "hidden_paths", "Hidden paths"),
    )),
    ("Costs", (
        ("telemetry", "api_price_model", "Compare with the API of"),
        ("telemetry", "gpu_hourly_usd", "GPU rental (USD per GPU-hour)"),
        ("telemetry", "electricity_usd_per_kwh", "Electricity (USD per kWh)"),
        ("telemetry", "pue", "Cooling overhead (PUE)"),
        ("telemetry", "hardware_usd", "Hardware price (USD)"),
        ("telemetry", "hardware_years", "Written off over (years)"),
    )),
    ("Display", (
        ("ui", "theme", "Theme"),
        ("ui", "flush_hz", "Pane redraws per second"),
        ("ui", "pane_max_blocks", "Lines kept per pane"),
        ("telemetry", "gpu_interval_s", "GPU meter interval (s)"),
        ("telemetry", "metrics_interval_s", "Engine meter interval (s)"),
    )),
)
"""(tab, ((section, setting, label), …)): what a person looks for, in words; every setting
not named here is on the Advanced tab under its section's name."""
GROUP_OF_SECTION = {"engine": "Engine", "fleet": "Sessions", "agent": "Sessions", "sandbox": "Sandbox",
                    "telemetry": "Costs", "ui": "Display"}
HELP_CHARS = 160
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


def _is_table(annotation: Any) -> bool:
    """A list of records (``list[EndpointSettings]``)."""
    args = typing.get_args(annotation)
    return typing.get_origin(annotation) is list and bool(args) and isinstance(args[0], type) \
        and issubclass(args[0], BaseModel)


class _Field:
    def __init__(self, name: str, annotation: Any, value: Any, doc: str) -> None:
        self.name = name
        base, self.optional = _unwrap_optional(annotation)
        self.kind = base
        self.widget: QWidget
        self._kept = value if _is_table(base) else None
        if self._kept is not None:  # a list of records (engine.endpoints) has no one-line form: kept as is
            w = QLineEdit(f"{len(value)} set; edited in the settings file")
            w.setReadOnly(True)
        elif base is bool:
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
        self.help: QLabel | None = None
        """The help text shown under the field (its docstring's first paragraph)."""

    def value(self) -> Any:
        w = self.widget
        if self._kept is not None:
            return self._kept
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

    def __init__(self, settings: Settings, parent: QWidget | None = None, *, section: str = "",
                 gpu_name: str = "") -> None:
        """``section``: the tab to open (a group's title or a settings section); ``gpu_name``:
        the GPU model NVML names (its typical hourly price is offered), empty when unknown."""
        super().__init__(parent)
        open_section = section
        self.setWindowTitle("Settings")
        self.setModal(True)
        self.setMinimumWidth(560)
        self.settings = settings
        self.fields: dict[str, dict[str, _Field]] = {section: {} for section in SECTIONS}
        self.tabs = QTabWidget()
        placed: set[tuple[str, str]] = set()
        forms: dict[str, QFormLayout] = {}
        for title, entries in GROUPS:
            form = forms[title] = self._page(title)
            for section, name, label in entries:
                self._add_field(form, section, name, label)
                placed.add((section, name))
        advanced = forms["Advanced"] = self._page("Advanced")
        for section in SECTIONS:
            rest = [n for n in type(getattr(settings, section)).model_fields if (section, n) not in placed]
            if rest:
                advanced.addRow(QLabel(f"<b>{section.capitalize()}</b>"))
            for name in rest:
                self._add_field(advanced, section, name, name.replace("_", " "))
        self._add_sandbox_risk(forms["Sandbox"], self.fields["sandbox"]["mode"])
        self._offer_gpu_price(forms["Costs"], gpu_name)
        titles = [self.tabs.tabText(i) for i in range(self.tabs.count())]
        wanted = GROUP_OF_SECTION.get(open_section, open_section.capitalize())
        if wanted in titles:
            self.tabs.setCurrentIndex(titles.index(wanted))
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

    def _page(self, title: str) -> QFormLayout:
        page = QWidget()
        form = QFormLayout(page)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        self.tabs.addTab(page, title)
        return form

    def _add_field(self, form: QFormLayout, section: str, name: str, label: str) -> _Field:
        model: BaseModel = getattr(self.settings, section)
        cls = type(model)
        doc = field_docs(cls).get(name, "")
        f = _Field(name, cls.model_fields[name].annotation, getattr(model, name), doc)
        box = QWidget()
        column = QVBoxLayout(box)
        column.setContentsMargins(0, 0, 0, 4)
        column.setSpacing(1)
        column.addWidget(f.widget)
        first = doc.split("\n\n")[0].replace("\n", " ")
        f.help = QLabel(first if len(first) <= HELP_CHARS else first[:HELP_CHARS - 1].rstrip() + "…")
        f.help.setWordWrap(True)
        f.help.setTextFormat(Qt.TextFormat.PlainText)
        f.help.setForegroundRole(f.help.foregroundRole().PlaceholderText)
        small = f.help.font()
        small.setPointSizeF(small.pointSizeF() * 0.9)
        f.help.setFont(small)
        f.help.setVisible(bool(doc))
        column.addWidget(f.help)
        row_label = QLabel(label)
        row_label.setToolTip(doc)
        form.addRow(row_label, box)
        self.fields[section][name] = f
        return f

    def _offer_gpu_price(self, form: QFormLayout, gpu_name: str) -> None:
        """No GPU-hour price set and a known GPU model: its typical price, filled in (Save
        keeps it; the cost meter uses the same while neither it nor a hardware price is set)."""
        typical = typical_gpu_hourly_usd(gpu_name) if gpu_name else None
        self.gpu_price_note = QLabel("")
        self.gpu_price_note.setWordWrap(True)
        field = self.fields["telemetry"]["gpu_hourly_usd"]
        widget = field.widget
        assert isinstance(widget, QLineEdit)
        if typical is None:
            self.gpu_price_note.setText(
                f"No typical price is known for {gpu_name}." if gpu_name else
                "No GPU seen here: empty counts energy and hardware instead.")
        elif self.settings.telemetry.gpu_hourly_usd is None:
            widget.setText(f"{typical:.2f}")
            self.gpu_price_note.setText(f"Filled in: the typical rental price of one {gpu_name} "
                                        f"(${typical:.2f} per GPU-hour), which the cost meter uses while "
                                        "none is set. Edit it to yours; to count energy and hardware "
                                        "instead, clear it and give the hardware price.")
        else:
            self.gpu_price_note.setText(f"A {gpu_name} typically rents for ${typical:.2f} per GPU-hour.")
        form.addRow("", self.gpu_price_note)

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

