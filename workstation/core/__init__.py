"""Pure Python: dataclasses, enums, state machines, math. No I/O, no Qt, nothing of ours."""
