"""Fixtures for the predictor tests: a real Prometheus on loopback, fed by backfilling (test-only helpers)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

from infercast.servers import ServerUnavailable, start_prometheus

PROM_CONFIG = "global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\nscrape_configs: []\n"


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else ""


def openmetrics(series: Iterable[tuple[str, str, dict[str, str], list[tuple[float, float]]]]) -> str:
    """OpenMetrics text from (name, type, labels, [(t, v), ...]); families grouped as the format requires."""
    fams: dict[str, tuple[str, list]] = {}
    for name, kind, labels, samples in series:
        fams.setdefault(name, (kind, []))[1].append((labels, samples))
    lines = []
    for name, (kind, members) in fams.items():
        # OpenMetrics names a counter family without its `_total` suffix; the samples carry it.
        family = name.removesuffix("_total") if kind == "counter" else name
        lines.append(f"# TYPE {family} {kind}")
        for labels, samples in members:
            sample_name = f"{family}_total" if kind == "counter" else name
            for t, v in samples:
                lines.append(f"{sample_name}{_labels(labels)} {float(v)!r} {float(t):.3f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def start_backfilled(tmp: Path, text: str):
    """Write blocks with `promtool tsdb create-blocks-from openmetrics`, then start Prometheus on them."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (scripts/install.sh installs the Debian package)")
    src = tmp / "backfill.om"
    src.write_text(text)
    data = tmp / "data"
    data.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(src), str(data)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    try:
        return start_prometheus(PROM_CONFIG, workdir=tmp)
    except ServerUnavailable as e:
        pytest.skip(str(e))
