"""PySide6 only here: window, tile grid, panes, meters, dialogs, recorder."""
