"""Issue 36 items 5 and 6: every duration and count of the fleet file bounded, the file itself bounded, merge keys.

What the user saw before: `actuator.interval_seconds: .inf` (or `1e308`), `misfire_grace_seconds: .inf` and
`leader.lease_seconds: .inf` loaded, then the daemon crashed at start with a traceback; `misfire_grace_seconds: 1e300`
started a daemon reporting "active" while every scheduled run failed inside APScheduler; a 1.2 MB file of 120k keys
took 28 s to refuse (a 50 MB one was still parsing after 3 minutes at 1.7 GB); `"{" * 5000` took 2-2.6 s; and
`<<: *base` was refused "could not determine a constructor for the tag 'tag:yaml.org,2002:merge'".  Now each is a
ConfigError naming the key and the bound (rc 2 from the command line, no traceback), the size is checked before
parsing, nesting as it is read, and merge keys work."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from infercast.config import MAX_FLEET_FILE_BYTES, ConfigError, check_bounds, load_config, parse_config
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "flash-sale.yaml"


def _doc() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def _with(path: str, value) -> dict:
    doc = _doc()
    cur = doc
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur.setdefault(k, {})
    cur[keys[-1]] = value
    return doc


INF = float("inf")


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        ("actuator.interval_seconds", INF, "actuator.interval_seconds: Input should be less than or equal to 3600"),
        ("actuator.interval_seconds", 1e308, "actuator.interval_seconds: Input should be less than or equal to 3600"),
        ("actuator.misfire_grace_seconds", INF, "actuator.misfire_grace_seconds: Input should be less than or equal"),
        ("actuator.misfire_grace_seconds", 1e300, "actuator.misfire_grace_seconds: Input should be less than or"),
        ("actuator.leader", {"kind": "redis", "lease_seconds": INF}, "actuator.leader.redis.lease_seconds: Input"),
        ("guardrails.cooldown_seconds", 1e308, "guardrails.cooldown_seconds: 1e+308 is above the most a fleet file"),
        ("policy.relax_hold_seconds", INF, "policy.relax_hold_seconds: must be a finite number, got inf"),
        ("router.slo_seconds", {"urgent": 1e300, "normal": 5, "low": 30}, "router.slo_seconds.urgent: 1e+300 is"),
        ("predictor.history_seconds", 1e12, "predictor.history_seconds: 1e+12 is above the most a fleet file may"),
        ("router.health_check_failures", 10**12, "router.health_check_failures: 1e+12 is above the most"),
    ],
)
def test_an_unbounded_duration_or_count_is_refused_naming_the_key(path, value, said):
    with pytest.raises(ConfigError) as e:
        parse_config(_with(path, value))
    assert said in str(e.value)


def test_every_shipped_fleet_file_is_within_every_bound():
    for p in sorted((REPO / "examples").glob("*.yaml")):
        assert check_bounds(load_config(p)) == [], p


def test_the_daemon_refuses_an_infinite_interval_with_rc_2_and_no_traceback(tmp_path):
    """Before: rc 1 and a traceback from the scheduler at start."""
    doc = _with("actuator.interval_seconds", INF)
    doc["actuator"]["audit_db"] = str(tmp_path / "a.db")
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    r = subprocess.run([sys.executable, "-m", "infercast.tools.cli", "actuator", "--config", str(path)],
                       capture_output=True, text=True, timeout=120, cwd=REPO, check=False)  # fmt: skip
    assert r.returncode == 2, r.stderr[-800:]
    assert "actuator.interval_seconds" in r.stderr and "Traceback" not in r.stderr


def test_a_fleet_file_over_the_size_cap_is_refused_before_it_is_parsed(tmp_path):
    """Before, a 1.2 MB file of 120k keys took 28 s (on a busy 2-core machine) to refuse, key by key."""
    path = tmp_path / "big.yaml"
    path.write_text("\n".join(f"k{i}: {i}" for i in range(120_000)))
    assert path.stat().st_size > MAX_FLEET_FILE_BYTES
    with pytest.raises(ConfigError, match=r"larger than a fleet file can be \(over 1024 KiB\); refused before parsing"):
        load_config(path)
    # a file of the cap itself is read (and judged on what it says)
    path.write_text("a: 1\n" + "#" * (MAX_FLEET_FILE_BYTES - 6) + "\n")
    with pytest.raises(ConfigError, match="pools: Field required"):
        load_config(path)


@pytest.mark.parametrize(
    "text",
    [
        "{" * 5000,
        "[" * 5000,
        "[ " * 5000,
        "[1, " * 5000,
        "{a: " * 5000,
        "- " * 3000 + "x",
        "a:\n" + "".join(f"{' ' * (i + 1)}k{i}:\n" for i in range(80)),
    ],
)
def test_a_fleet_file_nested_deeper_than_a_fleet_file_is_refused_as_it_is_read(tmp_path, text):
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"nested deeper than a fleet file can be \(over 64 levels"):
        load_config(path)


def test_yaml_merge_keys_work_and_what_is_written_beside_them_wins(tmp_path):
    text = EXAMPLE.read_text()
    pools = text.index("pools:\n")
    end = text.index("\ntargets:")
    text = (
        text[:pools]
        + """x-h100: &h100
  version: v4
  gpus_per_node: 4
  gpu: {name: H100-80GB, memory_gb: 80}
  memory_utilization: 1.0
  failover: [v3.5-fallback]
pools:
  v4-main:
    <<: *h100
    nodes: 12
  v4-standby:
    <<: *h100
    nodes: 4
    standby: true
  v3.5-fallback:
    <<: [*h100]
    version: v3.5
    nodes: 5
    weight: 0.0
    memory_utilization: 0.95
    failover: []
"""
        + text[end:]
    )
    path = tmp_path / "merged.yaml"
    path.write_text(text)
    cfg = load_config(path)
    assert cfg.pools == load_config(EXAMPLE).pools


def test_a_key_repeated_beside_a_merge_key_is_still_a_repeat(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("x-a: &a {nodes: 1}\npools:\n  p:\n    <<: *a\n    nodes: 2\n    nodes: 3\n")
    with pytest.raises(ConfigError, match="duplicate key 'nodes'"):
        load_config(path)
