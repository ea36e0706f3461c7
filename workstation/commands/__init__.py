"""Command-line verbs, one module per group. Each module has ``register(subparsers)``.

No Qt here: verbs that open a window call into ``workstation.app`` lazily.
"""
