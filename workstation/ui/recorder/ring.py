"""Shared memory between the GUI process and its encoder process: a ring of frame slots
plus a few counters, in one anonymous mapping (``memfd``; an unlinked temp file where
there is none). Nothing is left on disk or in ``/dev/shm`` whatever happens to either
process, and it is not bound by the size of ``/dev/shm`` (64 MB in many containers).

Single producer (the GUI thread writes slot ``n % slots`` for the ``n``-th picture) and
single consumer (the encoder, which bumps ``COUNTER_CONSUMED`` once it has converted a
picture): the producer writes a slot only while ``produced - consumed < slots``. The
frame message on the control pipe (a system call) orders the pixel writes before the
consumer's reads. Counters are aligned int64s, written by one side each.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import weakref
from multiprocessing import reduction

import numpy as np

HEADER_BYTES = 128
COUNTER_CONSUMED = 0
COUNTER_WRITTEN = 1
COUNTER_FRESH = 2
COUNTER_REPEATED = 3
COUNTER_CPU_NS = 4
COUNTER_BYTES = 5
N_COUNTERS = 16


def _anonymous_fd(size: int) -> int:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("workstation-recorder", os.MFD_CLOEXEC)
    else:
        fd, path = tempfile.mkstemp(prefix="workstation-recorder-")
        os.unlink(path)
    os.ftruncate(fd, size)
    return fd


class FrameRing:
    """``slots`` frame buffers of ``slot_bytes`` each, shared with a spawned process."""

    def __init__(self, slots: int, slot_bytes: int, *, fd: int | None = None) -> None:
        self.slots = slots
        self.slot_bytes = slot_bytes
        self.size = HEADER_BYTES + slots * slot_bytes
        self._fd = _anonymous_fd(self.size) if fd is None else fd
        self._closer = weakref.finalize(self, _close_fd, self._fd)
        self._map = mmap.mmap(self._fd, self.size)
        self.counters = np.frombuffer(self._map, np.int64, count=N_COUNTERS)

    def __reduce__(self):  # travels to the spawned encoder as a duplicated descriptor
        return (_attach, (self.slots, self.slot_bytes, reduction.DupFd(self._fd)))

    def slot(self, index: int, nbytes: int | None = None) -> memoryview:
        start = HEADER_BYTES + (index % self.slots) * self.slot_bytes
        return memoryview(self._map)[start:start + (self.slot_bytes if nbytes is None else nbytes)]

    def close(self) -> None:
        """Release the memory (the descriptor now; the mapping once no view of it is left)."""
        self.counters = self.counters.copy()  # keep the last counts, drop the view
        try:
            self._map.close()
        except BufferError:  # a view is still alive somewhere; the mapping goes with it
            pass
        self._closer()


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _attach(slots: int, slot_bytes: int, dupfd) -> FrameRing:
    return FrameRing(slots, slot_bytes, fd=dupfd.detach())
