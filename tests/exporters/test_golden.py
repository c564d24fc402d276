"""Golden scrape: the exposition of every captured engine payload, byte for byte (like node_exporter's e2e test).

Refresh after an intended change with `INFERCAST_UPDATE_GOLDEN=1 .venv/bin/pytest tests/exporters/test_golden.py`
and review the diff.  Non-deterministic series (scrape durations) are left out.
"""

from __future__ import annotations

import os

from infercast.exporters.server import Exporter, build_sources
from tests.exporters.conftest import fleet, good_targets
from tests.exporters.fakes import ENGINES
from tests.exporters.test_server import render

GOLDEN = ENGINES / "golden-exposition.prom"
VOLATILE = ("infercast_target_scrape_duration_seconds",)


def test_exposition_matches_the_golden_file(fixture_server):
    config = fleet(good_targets(fixture_server), scrape_timeout_seconds=2.0)
    exp = Exporter(config, build_sources(config))
    exp.scrape()
    text = render(exp)
    exp.close()
    lines = [ln for ln in text.splitlines(keepends=True) if not any(v in ln for v in VOLATILE)]
    got = "".join(lines)
    if os.environ.get("INFERCAST_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text(), "exposition changed; see the module docstring to refresh the golden file"
