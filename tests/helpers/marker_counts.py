"""A pytest plugin: at the end of a run, how many tests of each marker ran, passed,
failed and skipped — so a run that lost a whole group (the engine tests all skipped, the
GUI tests not collected) shows it at a glance, and CI's log says it in one JSON line.

A test counts under every marker it carries (``engine``, ``gui``, ``slow``, ``gpu``) and
under ``unmarked`` when it carries none. "ran" = its body ran (passed or failed);
"errors" = its set-up failed; "skipped" = it did not run (xfail counts as passed,
xpass as failed, as ``xfail_strict`` makes them).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

MARKERS = ("engine", "gui", "slow", "gpu")
OUTCOMES = ("ran", "passed", "failed", "errors", "skipped")


class MarkerCounts:
    def __init__(self) -> None:
        self.markers: dict[str, tuple[str, ...]] = {}
        self.outcome: dict[str, str] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            names = tuple(m for m in MARKERS if item.get_closest_marker(m) is not None)
            self.markers[item.nodeid] = names or ("unmarked",)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup":
            if report.skipped:
                self.outcome[report.nodeid] = "skipped"
            elif report.failed:
                self.outcome[report.nodeid] = "errors"
        elif report.when == "call":
            if report.skipped and not hasattr(report, "wasxfail"):
                self.outcome[report.nodeid] = "skipped"  # pytest.skip() inside the test
            else:
                self.outcome[report.nodeid] = "failed" if report.failed else "passed"
        elif report.when == "teardown" and report.failed and self.outcome.get(report.nodeid) == "passed":
            self.outcome[report.nodeid] = "errors"

    def table(self) -> dict[str, dict[str, int]]:
        counts: dict[str, Counter[str]] = defaultdict(Counter)
        for nodeid, names in self.markers.items():
            outcome = self.outcome.get(nodeid)
            if outcome is None:
                continue  # deselected or not reached (-x)
            for name in names:
                counts[name][outcome] += 1
                if outcome in ("passed", "failed"):
                    counts[name]["ran"] += 1
        return {name: {o: counts[name][o] for o in OUTCOMES} for name in (*MARKERS, "unmarked")}

    def pytest_terminal_summary(self, terminalreporter) -> None:  # noqa: ANN001 - pytest's type is private
        table = self.table()
        write = terminalreporter.write_line
        terminalreporter.section("tests per marker")
        write(f"{'marker':10} " + " ".join(f"{o:>8}" for o in OUTCOMES))
        for name, row in table.items():
            write(f"{name:10} " + " ".join(f"{row[o]:>8}" for o in OUTCOMES))
        write("marker counts: " + json.dumps(table))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(MarkerCounts(), "workstation-marker-counts")
