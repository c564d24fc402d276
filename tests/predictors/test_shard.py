"""Sharding the predictor (predictors/shard.py): the split itself, and two sharded loops against one unsharded one.

The split is checked against Prometheus' own `hashmod` in tests/predictors/test_shard_prometheus.py; here: the
arithmetic, the spec parsing, and that N sharded `PredictorLoop`s publish disjoint sets whose union is, value for
value, what one loop over the whole fleet publishes.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from infercast.config import PredictorConfig
from infercast.predictors.service import PredictorLoop
from infercast.predictors.shard import SHARD_ENV, Shard, ShardedStore, hashmod, shard_of
from infercast.store import Series
from infercast.store.memory import MemoryStore

KV = "infercast_kv_cache_usage_ratio"
T0 = 1_800_000_000.0


def test_hashmod_is_md5_of_the_joined_values_low_eight_bytes_mod_n():
    # md5("v4-main;v4") = 9a2e...; Prometheus reads bytes 8..15 big-endian (model/relabel/relabel.go)
    import hashlib

    d = hashlib.md5(b"v4-main;v4").digest()
    assert hashmod(("v4-main", "v4"), 7) == int.from_bytes(d[8:], "big") % 7
    assert shard_of("v4-main", "v4", 1) == 0
    assert all(shard_of("p", "v", n) == shard_of("p", "v", n) < n for n in range(1, 9))


def test_the_split_is_balanced_on_ten_thousand_groups():
    groups = [(f"pool-{i}", f"v{i % 3}") for i in range(10_000)]
    for n in (2, 4):
        counts = Counter(shard_of(p, v, n) for p, v in groups)
        assert set(counts) == set(range(n))
        assert max(counts.values()) / min(counts.values()) < 1.1  # 10,000 / n each, within 10%


@pytest.mark.parametrize(
    ("text", "host", "want"),
    [("0/2", None, Shard(0, 2)), ("1/2", None, Shard(1, 2)), ("ordinal/3", "infercast-predictor-2", Shard(2, 3))],
)
def test_shard_specs(text, host, want):
    assert Shard.parse(text, hostname=host) == want


@pytest.mark.parametrize(
    ("text", "host", "match"),
    [
        ("2/2", None, "0 <= index < count"),
        ("0/0", None, "count >= 1"),
        ("half", None, "expected I/N"),
        ("ordinal/2", "predictor", "does not end in -<ordinal>"),
        ("ordinal/2", "predictor-5", "0 <= index < count"),
    ],
)
def test_bad_shard_specs_say_what_is_wrong(text, host, match):
    with pytest.raises(ValueError, match=match):
        Shard.parse(text, hostname=host)


def test_the_environment_gives_the_shard_when_no_flag_does(monkeypatch):
    monkeypatch.setenv(SHARD_ENV, "1/4")
    assert Shard.from_env(None) == Shard(1, 4)
    assert Shard.from_env("0/2") == Shard(0, 2)  # the flag wins
    monkeypatch.delenv(SHARD_ENV)
    assert Shard.from_env(None) == Shard(0, 1)


class _Fixed:
    def __init__(self, series: list[Series]) -> None:
        self.series = series

    def query_range(self, metric, matchers, start, end, step):
        return self.series


def test_sharded_stores_are_disjoint_and_cover_everything_including_series_without_a_pool():
    t = np.array([0.0])
    series = [Series({"pool": f"p{i}", "version": "v1"}, t, t) for i in range(40)]
    series.append(Series({"model": "lstm"}, t, t))  # no pool: shard 0 keeps it
    seen: list[list[dict]] = []
    for i in range(3):
        seen.append([s.labels for s in ShardedStore(_Fixed(series), Shard(i, 3)).query_range("m", None, 0, 0, 1)])
    keys = [frozenset(tuple(sorted(lab.items())) for lab in part) for part in seen]
    assert all(k for k in keys)
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
    assert sum(len(k) for k in keys) == len(series)
    assert {"model": "lstm"} in seen[0]


def _fill(store: MemoryStore, groups: list[tuple[str, str]]) -> None:
    for j, (pool, version) in enumerate(groups):
        for t in np.arange(T0 - 3600, T0 + 1, 15.0):
            store.write(KV, {"pool": pool, "version": version, "instance": "n0"}, t, 0.3 + 0.001 * j + 1e-5 * (t - T0))


def test_two_sharded_loops_publish_disjoint_halves_of_what_one_loop_publishes():
    groups = [(f"pool-{i:02d}", "v4" if i % 2 else "v3.5") for i in range(16)]
    store = MemoryStore()
    _fill(store, groups)
    cfg = PredictorConfig(history_seconds=3600.0, min_history_points=20)

    def forecasts(s):
        out = PredictorLoop(cfg, rps_model="kalman").tick(T0, s)
        return {
            (x.label_dict["pool"], x.label_dict["version"], x.label_dict["band"]): x.value
            for x in out
            if x.name == "infercast_forecast_kv_cache_usage_ratio"
        }

    whole = forecasts(store)
    parts = [forecasts(ShardedStore(store, Shard(i, 2))) for i in range(2)]
    assert {(p, v) for p, v, _ in whole} == set(groups)
    assert parts[0] and parts[1] and not (parts[0].keys() & parts[1].keys())
    assert {**parts[0], **parts[1]} == whole  # the same series, the same values
    for i, part in enumerate(parts):
        assert all(shard_of(p, v, 2) == i for p, v, _ in part)
