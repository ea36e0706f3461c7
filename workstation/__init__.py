"""workstation: a tuned local vLLM server and dozens of coding agents in tiled panes."""

__version__ = "0.1.0"
