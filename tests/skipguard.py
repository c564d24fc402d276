"""A pytest plugin: the run fails on any skip that is not a missing optional machine part (a GPU), and says which.

Everything else the suite needs -- Prometheus, promtool, Alertmanager, amtool, Redis, torch, prophet -- is installed
by `scripts/install.sh`, so a skip means part of the suite did not run, and CI must not read that as a pass (the
end-to-end and panel tests once skipped because the twin emitted nothing).  The one allowed reason is a GPU: skip
with `pytest.skip("needs a GPU: ...")`.  `tests/conftest.py` loads it; `-p tests.skipguard` loads it anywhere.
"""

from __future__ import annotations

import re

import pytest

#: the only skip reasons that do not fail the run
ALLOWED = re.compile(r"^needs a GPU\b")


class SkipGuard:
    def __init__(self) -> None:
        self.bad: list[tuple[str, str]] = []

    def _record(self, report) -> None:
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        longrepr = report.longrepr
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        if not ALLOWED.match(reason):
            self.bad.append((report.nodeid, reason))

    def pytest_runtest_logreport(self, report) -> None:
        self._record(report)

    def pytest_collectreport(self, report) -> None:
        self._record(report)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.bad:
            return
        terminalreporter.section("skips that fail this run", sep="=", red=True, bold=True)
        terminalreporter.line(
            f"{len(self.bad)} skipped for a reason other than a missing GPU (the only allowed one: "
            "'needs a GPU: ...'); scripts/install.sh installs everything else:"
        )
        for nodeid, reason in self.bad:
            terminalreporter.line(f"  {nodeid}: {reason}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if self.bad and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config) -> None:
    if not config.pluginmanager.has_plugin("infercast-skipguard"):
        config.pluginmanager.register(SkipGuard(), "infercast-skipguard")
