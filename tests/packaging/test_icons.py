"""The icon set: every named icon exists, draws, and takes the palette's or a given colour."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.gui

WANTED = (
    "new start pause approve deny layout record stop settings engine meters tuning diff commit "
    "merge discard zoom back folder repository warning check error queued running paused"
).split()


def _opaque_colors(pixmap) -> Counter:
    image = pixmap.toImage()
    counts: Counter = Counter()
    for y in range(image.height()):
        for x in range(image.width()):
            color = image.pixelColor(x, y)
            if color.alpha() >= 250:
                counts[color.name()] += 1
    return counts


def test_every_icon_the_window_needs_is_there(qapp) -> None:
    from workstation.ui.icons import icon_names

    assert set(WANTED) <= set(icon_names())


@pytest.mark.parametrize("name", WANTED)
def test_icon_draws_in_the_palette_text_colour(qapp, name: str) -> None:
    from PySide6.QtGui import QPalette

    from workstation.ui.icons import icon

    text_color = qapp.palette().color(QPalette.ColorGroup.Active, QPalette.ColorRole.WindowText)
    colours = _opaque_colors(icon(name).pixmap(32, 32))
    assert sum(colours.values()) > 20, "the icon is (almost) empty"
    assert set(colours) == {text_color.name()}


def test_icons_follow_a_palette_change_without_being_recreated(qapp) -> None:
    from PySide6.QtGui import QColor, QPalette

    from workstation.ui.icons import icon

    start = icon("start")
    original = qapp.palette()
    try:
        for text in ("#f0f0f0", "#101010"):  # a dark theme, then a light one
            palette = QPalette(original)
            palette.setColor(QPalette.ColorRole.WindowText, QColor(text))
            qapp.setPalette(palette)
            assert set(_opaque_colors(start.pixmap(24, 24))) == {text}
    finally:
        qapp.setPalette(original)


def test_fixed_state_colour_and_disabled_mode(qapp) -> None:
    from PySide6.QtCore import QSize
    from PySide6.QtGui import QIcon

    from workstation.ui.icons import icon

    amber = icon("warning", "#d97706")
    assert set(_opaque_colors(amber.pixmap(24, 24))) == {"#d97706"}
    disabled = amber.pixmap(QSize(24, 24), QIcon.Mode.Disabled).toImage()
    alphas = {disabled.pixelColor(x, y).alpha() for x in range(24) for y in range(24)}
    assert max(alphas) < 200, "a disabled fixed-colour icon is drawn faded"


def test_icons_are_cached_and_scale_for_hidpi(qapp) -> None:
    from PySide6.QtCore import QSize

    from workstation.ui.icons import icon

    assert icon("stop") is icon("stop")
    assert icon("stop", "#ff0000") is not icon("stop")
    pixmap = icon("stop").pixmap(QSize(24, 24), 2.0)
    assert (pixmap.width(), pixmap.height(), pixmap.devicePixelRatio()) == (48, 48, 2.0)


def test_unknown_icon_name_is_a_clear_error(qapp) -> None:
    from workstation.ui.icons import icon

    with pytest.raises(KeyError, match="no icon named 'nope'"):
        icon("nope")


def test_app_icon_has_every_size(qapp) -> None:
    from workstation.ui.icons import APP_ICON_SIZES_PX, app_icon

    sizes = {(s.width(), s.height()) for s in app_icon().availableSizes()}
    assert sizes == {(n, n) for n in APP_ICON_SIZES_PX}
    assert set(APP_ICON_SIZES_PX) >= {16, 512}


def test_symbolic_svgs_draw_only_in_current_color() -> None:
    """So that they recolour: no hard-coded colour may hide in a symbolic icon."""
    from workstation.ui.icons import SYMBOLIC_DIR

    for path in Path(SYMBOLIC_DIR).glob("*.svg"):
        text = path.read_text()
        assert 'viewBox="0 0 24 24"' in text, path.name
        assert not re.search(r"#[0-9a-fA-F]{3,8}\b|rgb\(", text), f"{path.name} has a fixed colour"


def test_app_icon_pngs_are_rendered_from_the_current_svg() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, str(root / "packaging" / "render_icons.py"), "--check"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
