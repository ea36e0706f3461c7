"""A pytest plugin: every test that takes longer than ``SLOW_S`` (set-up, body and tear-down
together) says so on its own line as soon as it ends, with the time the run has taken so far.

CI stops a job at its time limit without the end-of-run summary (``--durations`` prints only
at the end), so a suite that outgrows the limit would leave no trace of where its time went.
These lines are that trace, and they cost nothing for the fast tests.
"""

from __future__ import annotations

import time

import pytest

SLOW_S = 30.0


class SlowLog:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = time.monotonic()
        self.taken: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.taken[report.nodeid] = self.taken.get(report.nodeid, 0.0) + report.duration
        if report.when != "teardown" or self.taken[report.nodeid] < SLOW_S:
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            elapsed = time.monotonic() - self.started
            reporter.write_line(f"slow: {report.nodeid} took {self.taken[report.nodeid]:.0f} s "
                                f"(run at {elapsed:.0f} s)")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SlowLog(config), "workstation-slow-log")
