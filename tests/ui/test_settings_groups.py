"""Settings for people: grouped tabs with labels in words and help texts, and the GPU-hour
price offered for the GPU model the meters saw — in the real window."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt

from workstation.core.gpu_prices import typical_gpu_hourly_usd

pytestmark = pytest.mark.gui


@pytest.fixture
def window(qtbot, settings):  # type: ignore[no-untyped-def]
    from workstation.ui.main_window import MainWindow

    win = MainWindow(settings)
    win.show()
    qtbot.addWidget(win)
    yield win
    win.allow_close()


def test_settings_are_grouped_for_people_with_help_texts(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    from workstation.config import Settings

    qtbot.keyClick(window, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)
    dialog = window.settings_dialog
    tabs = [dialog.tabs.tabText(i) for i in range(dialog.tabs.count())]
    assert tabs == ["Engine", "Sessions", "Sandbox", "Costs", "Display", "Advanced"]
    # every setting of the schema is somewhere, once
    for section in ("engine", "fleet", "agent", "telemetry", "ui", "sandbox"):
        model = Settings.model_fields[section].annotation
        assert set(dialog.fields[section]) == set(model.model_fields), section
    # a field has a label in words and its help under it, visible
    max_gen = dialog.fields["fleet"]["max_generating"]
    assert max_gen.help is not None and max_gen.help.text().startswith(max_gen.widget.toolTip()[:40])
    dialog.tabs.setCurrentIndex(tabs.index("Sessions"))
    assert max_gen.help.isVisible()
    form = dialog.tabs.currentWidget().layout()
    assert form.labelForField(max_gen.widget.parentWidget()).text() == "Sessions generating at once"
    # a settings section opens its group: the sandbox banner's "sandbox" → Sandbox
    dialog.reject()
    window.open_settings("sandbox")
    assert window.settings_dialog.tabs.tabText(window.settings_dialog.tabs.currentIndex()) == "Sandbox"
    window.settings_dialog.reject()


def test_the_gpu_hour_price_defaults_to_the_gpus_typical_one_and_is_editable(qtbot, window, settings) -> None:  # type: ignore[no-untyped-def]
    window.gpu_name = "NVIDIA H200"  # what the meters saw
    window.open_settings("telemetry")
    dialog = window.settings_dialog
    assert dialog.tabs.tabText(dialog.tabs.currentIndex()) == "Costs"
    price = dialog.fields["telemetry"]["gpu_hourly_usd"].widget
    assert price.text() == f"{typical_gpu_hourly_usd('NVIDIA H200'):.2f}" == "3.80"
    assert "typical rental price of one NVIDIA H200" in dialog.gpu_price_note.text()
    price.setText("4.25")  # the user's own contract
    dialog.buttons.accepted.emit()
    assert json.loads(settings.settings_file.read_text())["telemetry"]["gpu_hourly_usd"] == 4.25
    # a set price is kept, the typical one only named
    window.open_settings("telemetry")
    again = window.settings_dialog
    assert again.fields["telemetry"]["gpu_hourly_usd"].widget.text() == "4.25"
    assert "typically rents for $3.80" in again.gpu_price_note.text()
    again.reject()
