"""Icons by name from :mod:`workstation.ui.icons`, with an empty icon (never a crash)
where a name is missing from the set."""

from __future__ import annotations

import logging

from PySide6.QtGui import QColor, QIcon

log = logging.getLogger(__name__)


def safe_icon(name: str, color: QColor | str | None = None) -> QIcon:
    try:
        from workstation.ui.icons import icon
    except ImportError:
        return QIcon()
    try:
        return icon(name, color)
    except KeyError:
        log.debug("no icon named %s", name)
        return QIcon()


def safe_app_icon() -> QIcon:
    """The app's icon; an empty one where the icon set cannot load."""
    try:
        from workstation.ui.icons import app_icon
    except ImportError:
        return QIcon()
    return app_icon()
