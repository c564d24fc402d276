"""Issue 24 item 7, the rest: every count and rate in a fleet file has a documented maximum (infercast/config/,
docs/security.md), and a value past it is a ConfigError naming the key and the bound -- rc 2 from the command line.
Before, `rps: 1e12` in a traffic phase, `max_batch: 1e9`, `change_budget_per_hour: 1e9` and the like were accepted
and the twin or the actuator tried to honour them."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from infercast.config import (
    MAX_BATCH,
    MAX_CHANGE_BUDGET_PER_HOUR,
    MAX_RPS,
    MAX_SCENARIO_SECONDS,
    MAX_TOKENS,
    ConfigError,
    parse_config,
)
from tests.conftest import REPO

FLASH = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())


def _set(path: str, value) -> dict:
    data = copy.deepcopy(FLASH)
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
    node[int(keys[-1]) if isinstance(node, list) else keys[-1]] = value
    return data


CASES = [
    ("scenario.phases.0.rps", 1e12, f"{MAX_RPS:.0f}"),
    ("scenario.streams.0.phases.1.rps", 1e12, f"{MAX_RPS:.0f}"),
    ("router.rate_limit_rps", 1e12, f"{MAX_RPS:.0f}"),
    ("scenario.duration_seconds", 1e12, f"{MAX_SCENARIO_SECONDS:.0f}"),
    ("scenario.lengths.request_max_tokens", 10**12, str(MAX_TOKENS)),
    ("guardrails.change_budget_per_hour", 10**9, str(MAX_CHANGE_BUDGET_PER_HOUR)),
    ("versions.v4.batcher.max_batch", 10**9, str(MAX_BATCH)),
]


@pytest.mark.parametrize(("path", "value", "bound"), CASES, ids=[c[0] for c in CASES])
def test_a_count_or_rate_past_its_maximum_is_refused_naming_the_key_and_the_bound(path, value, bound):
    parse_config(FLASH)  # the example itself is within every bound
    with pytest.raises(ConfigError) as e:
        parse_config(_set(path, value))
    assert f"less than or equal to {bound}" in str(e.value)
    assert path.split(".")[-1] in str(e.value)


def test_too_many_faults_is_refused():
    faults = [{"at_seconds": 1, "node": "v4-main-0"}] * 10_001
    with pytest.raises(ConfigError, match="at most 10000 items"):
        parse_config(_set("scenario.faults", faults))


def test_the_twin_exits_2_on_a_phase_of_a_trillion_requests_a_second(tmp_path):
    """What the user sees: `infercast twin run --scenario big.yaml` stops at once with the key and the bound, rc 2."""
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(_set("scenario.phases.0.rps", 1e12)))
    r = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "twin", "run", "--scenario", str(path),
         "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120, cwd=REPO, check=False,
    )  # fmt: skip
    assert r.returncode == 2, (r.returncode, r.stderr[-1500:])
    assert "scenario.phases.0.rps" in r.stderr and "less than or equal to 1000000" in r.stderr
