"""workstation: a tuned local vLLM server and dozens of coding agents in tiled panes."""

__version__ = "0.1.0"

APP_ID = "org.workstation.Workstation"
"""Reverse-DNS id of the desktop app: the .desktop file's and AppStream component's name, the
icon's theme name, and what the window passes to ``QGuiApplication.setDesktopFileName``."""
