"""PyInstaller runtime hook, run before PyInstaller's own: remember the user's Qt paths.

PyInstaller's PySide6 hook overwrites ``QT_PLUGIN_PATH`` and ``QML2_IMPORT_PATH`` with the
bundle's folders. This hook keeps the values the user launched the bundle with, so that
``bundle_entry.py`` can hand them back to child processes unchanged.
"""

import os

for _name in ("QT_PLUGIN_PATH", "QML2_IMPORT_PATH"):
    _value = os.environ.get(_name)
    if _value is not None:
        os.environ["_WORKSTATION_USER_" + _name] = _value
os.environ["_WORKSTATION_USER_ENV_KEPT"] = "1"
