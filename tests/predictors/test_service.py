"""The predictor loop on bad input: what a user sees on /metrics (and in the log) for each kind of trouble.

Driven by script at chosen times, no sleeps: `tick(now, store)` returns exactly the samples the service serves.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from infercast.config import PredictorConfig, load_config
from infercast.predictors import registry
from infercast.predictors.publish import exposition
from infercast.predictors.service import PredictorLoop
from infercast.store import StoreError
from infercast.store.memory import MemoryStore

KV = "infercast_kv_cache_usage_ratio"
REQ = "infercast_router_requests_total"
T0 = 1_800_000_000.0
POOL = {"pool": "v4-main", "version": "v4"}


def _cfg(**kw) -> PredictorConfig:
    base = {
        "history_seconds": 3600.0,
        "step_seconds": 15.0,
        "min_history_points": 20,
        "stale_after_seconds": 120.0,
        "refit_interval_seconds": 1800.0,
    }
    return PredictorConfig(**{**base, **kw})


def _loop(**kw) -> PredictorLoop:
    return PredictorLoop(_cfg(), trigger=0.75, rps_model="kalman", **kw)


def _fill(store: MemoryStore, start: float, end: float, kv=lambda t: 0.4, rps: float = 50.0, pool=POOL, skip=None):
    """KV gauge of two instances and a request counter per instance, every 15 s in [start, end)."""
    for t in np.arange(start, end, 15.0):
        if skip is not None and skip(t):
            continue
        for inst in ("n1", "n2"):
            store.write(KV, {**pool, "instance": inst}, t, kv(t))
            labels = {**pool, "instance": inst, "priority": "normal", "outcome": "ok"}
            store.write(REQ, labels, t, rps / 2 * (t - start))


def _by_name(samples, name):
    return {tuple(sorted(s.label_dict.items())): s.value for s in samples if s.name == name}


def _skips(samples):
    return {
        (s.label_dict["pool"], s.label_dict["series"], s.label_dict["reason"])
        for s in samples
        if s.name.endswith("skipped")
    }


def _kv_point(samples, pool="v4-main"):
    for s in samples:
        d = s.label_dict
        if s.name == "infercast_forecast_kv_cache_usage_ratio" and d["pool"] == pool and d["band"] == "point":
            return s.value
    return None


def test_healthy_series_publish_forecasts_eta_and_success_time():
    st = MemoryStore()
    _fill(st, T0, T0 + 3600, kv=lambda t: 0.3 + 0.4 * (t - T0) / 3600)  # ramps towards 0.75
    out = _loop().tick(T0 + 3585, st)
    kv = _by_name(out, "infercast_forecast_kv_cache_usage_ratio")
    # Both instances are at the same level, so the pool's mean and its fullest instance forecast alike.
    for aggregate in ("mean", "max"):
        key = (
            ("aggregate", aggregate),
            ("band", "point"),
            ("forecaster", "kalman_aci"),
            ("horizon", "300s"),
            ("pool", "v4-main"),
            ("version", "v4"),
        )
        assert kv[key] == pytest.approx(0.3 + 0.4 * (3585 + 300) / 3600, abs=0.01)
    eta = _by_name(out, "infercast_forecast_breach_eta_seconds")
    # 0.73 at the horizon; the upper band crosses 0.75 before it or not at all: either a time within 300 s or +Inf.
    assert {dict(k)["aggregate"] for k in eta} == {"mean", "max"}
    for value in eta.values():
        assert value == float("inf") or 0 < value <= 300
    rps = _by_name(out, "infercast_forecast_requests_per_second")
    rps_key = (("band", "point"), ("forecaster", "kalman_aci"), ("horizon", "300s"), *key[4:])
    assert rps[rps_key] == pytest.approx(50.0)
    assert _by_name(out, "infercast_forecast_last_success_timestamp_seconds") == {
        (("forecaster", "kalman_aci"),): T0 + 3585
    }
    assert not _skips(out)
    assert 'infercast_forecast_kv_cache_usage_ratio{aggregate="max",band="upper",forecaster="kalman_aci"' in (
        exposition(out)
    )


def test_breach_eta_counts_from_now_to_the_upper_band_crossing():
    st = MemoryStore()
    _fill(st, T0, T0 + 3600, kv=lambda t: 0.5 + 0.3 * (t - T0) / 3600)  # 0.8 by the end: crossing 0.75 soon
    out = _loop().tick(T0 + 3300, st)
    for eta in _by_name(out, "infercast_forecast_breach_eta_seconds").values():  # mean and fullest instance
        assert 0 < eta <= 300


def test_counter_reset_reads_as_a_restart_not_a_negative_rate():
    st = MemoryStore()
    for t in np.arange(T0, T0 + 3600, 15.0):
        # One instance restarts at T0 + 1800: its counter starts again from 0.
        v = 30.0 * ((t - T0) if t < T0 + 1800 else (t - T0 - 1800))
        st.write(REQ, {**POOL, "instance": "n1", "priority": "normal", "outcome": "ok"}, t, v)
        st.write(KV, {**POOL, "instance": "n1"}, t, 0.4)
    out = _loop().tick(T0 + 3585, st)
    rps = {dict(k)["band"]: v for k, v in _by_name(out, "infercast_forecast_requests_per_second").items()}
    assert rps["point"] == pytest.approx(30.0, rel=0.02)
    assert rps["lower"] > 0


def test_gap_then_recovery(caplog):
    st = MemoryStore()
    loop = _loop()
    # Data for 40 min, nothing for 10 min, then data again.
    _fill(st, T0, T0 + 2400)
    _fill(st, T0 + 3000, T0 + 3150)  # 10 samples after the hole
    with caplog.at_level(logging.WARNING, logger="infercast.predictors.service"):
        out = loop.tick(T0 + 3135, st)
    assert ("v4-main", "kv", "gap") in _skips(out)
    assert _kv_point(out) is None  # no guess
    assert "no forecast for kv v4-main/v4: gap" in caplog.text
    _fill(st, T0 + 3150, T0 + 3400)
    out = loop.tick(T0 + 3390, st)
    assert not _skips(out) and _kv_point(out) == pytest.approx(0.4)


def test_nan_values_are_reported_as_nan_and_scattered_nan_is_tolerated():
    st = MemoryStore()
    _fill(st, T0, T0 + 3000)
    for t in np.arange(T0 + 3000, T0 + 3600, 15.0):  # the exporter keeps reporting, but NaN
        for inst in ("n1", "n2"):
            st.write(KV, {**POOL, "instance": inst}, t, float("nan"))
    loop = _loop()
    out = loop.tick(T0 + 3585, st)
    assert ("v4-main", "kv", "nan") in _skips(out)
    assert _kv_point(out) is None
    # Values come back: first too few since the hole ("gap"), then a forecast again, with nothing reset by hand.
    _fill(st, T0 + 3600, T0 + 3690)
    assert ("v4-main", "kv", "gap") in _skips(loop.tick(T0 + 3675, st))
    _fill(st, T0 + 3690, T0 + 3900)
    assert _kv_point(loop.tick(T0 + 3885, st)) == pytest.approx(0.4)
    st2 = MemoryStore()
    _fill(st2, T0, T0 + 3600, kv=lambda t: float("nan") if int(t) % 45 == 0 else 0.4)
    assert _kv_point(_loop().tick(T0 + 3585, st2)) == pytest.approx(0.4)


def test_a_new_series_waits_for_enough_history_then_forecasts():
    st = MemoryStore()
    loop = _loop()
    _fill(st, T0, T0 + 3600)
    new = {"pool": "v4-long", "version": "v4"}
    _fill(st, T0 + 3450, T0 + 3600, kv=lambda t: 0.2, pool=new)  # 10 samples so far
    out = loop.tick(T0 + 3585, st)
    assert ("v4-long", "kv", "too_short") in _skips(out)
    assert _kv_point(out, "v4-long") is None and _kv_point(out) == pytest.approx(0.4)
    _fill(st, T0 + 3600, T0 + 3800, kv=lambda t: 0.2, pool=new)
    _fill(st, T0 + 3600, T0 + 3800)
    out = loop.tick(T0 + 3795, st)
    assert _kv_point(out, "v4-long") == pytest.approx(0.2)


def test_a_series_that_disappears_is_stale_and_its_forecast_goes_away():
    st = MemoryStore()
    loop = _loop()
    _fill(st, T0, T0 + 3600)
    gone = {"pool": "v3.5-fallback", "version": "v3.5"}
    _fill(st, T0, T0 + 3000, kv=lambda t: 0.6, pool=gone)  # stops at T0 + 3000
    out = loop.tick(T0 + 3585, st)
    assert ("v3.5-fallback", "kv", "stale") in _skips(out)
    assert ("v3.5-fallback", "rps", "stale") in _skips(out)
    assert _kv_point(out, "v3.5-fallback") is None
    assert _kv_point(out) == pytest.approx(0.4)
    # It comes back (a restarted pool): forecast again once it has 20 fresh samples.
    _fill(st, T0 + 3600, T0 + 3900)
    _fill(st, T0 + 3600, T0 + 3900, kv=lambda t: 0.6, pool=gone)
    assert _kv_point(loop.tick(T0 + 3885, st), "v3.5-fallback") == pytest.approx(0.6)


class _Down:
    def query_range(self, *a, **kw):
        raise StoreError("cannot connect to Prometheus at http://127.0.0.1:1: ConnectionError")


def test_store_down_publishes_no_forecast_then_recovers():
    st = MemoryStore()
    _fill(st, T0, T0 + 3600)
    loop = _loop()
    first = loop.tick(T0 + 3585, st)
    down = loop.tick(T0 + 3600, _Down())
    assert {("v4-main", "kv", "source_down"), ("v4-main", "rps", "source_down")} <= _skips(down)
    assert _kv_point(down) is None
    # The last success time stays where it was: staleness is visible.
    assert _by_name(down, "infercast_forecast_last_success_timestamp_seconds") == _by_name(
        first, "infercast_forecast_last_success_timestamp_seconds"
    )
    _fill(st, T0 + 3600, T0 + 3700)
    back = loop.tick(T0 + 3690, st)
    assert not _skips(back) and _kv_point(back) == pytest.approx(0.4)


def test_corrupt_model_file_falls_back_to_the_best_baseline_and_says_so(tmp_path, repo_root, caplog):
    bad = tmp_path / "lstm_kv"
    (tmp_path / "lstm_kv.safetensors").write_bytes(b"\x00garbage" * 10)
    (tmp_path / "lstm_kv.json").write_text("{not json")
    cfg = load_config(repo_root / "examples" / "flash-sale.yaml")
    cfg = cfg.model_copy(update={"predictor": _cfg(model_file=str(bad))})
    with caplog.at_level(logging.WARNING):
        loop = PredictorLoop.from_config(cfg, rps_model="kalman")
    assert "lstm skipped" in caplog.text and "instead" in caplog.text
    st = MemoryStore()
    _fill(st, T0, T0 + 3600)
    out = loop.tick(T0 + 3585, st)
    assert ("", "kv:lstm", "model_error") in _skips(out)
    models = {s.label_dict["forecaster"] for s in out if s.name == "infercast_forecast_kv_cache_usage_ratio"}
    assert models == {"kalman_aci"}


def test_a_model_that_fails_at_forecast_time_falls_back_for_that_series():
    class Exploding:
        name = "lstm"

        def fit(self, histories):
            return self

        def forecast(self, history, horizon_s):
            raise RuntimeError("shape mismatch")

    st = MemoryStore()
    _fill(st, T0, T0 + 3600)
    loop = _loop(lstm=Exploding())
    out = loop.tick(T0 + 3585, st)
    assert ("v4-main", "kv:lstm_aci", "model_error") in _skips(out)
    assert ("v4-main", "kv_max:lstm_aci", "model_error") in _skips(out)
    assert _kv_point(out) == pytest.approx(0.4)  # from the baseline
    assert {s.label_dict["forecaster"] for s in out if s.name == "infercast_forecast_kv_cache_usage_ratio"} == {
        "kalman"
    }


def test_the_combination_is_the_traffic_model_by_default():
    st = MemoryStore()
    _fill(st, T0, T0 + 3600, rps=80.0)
    out = PredictorLoop(_cfg(), trigger=0.75).tick(T0 + 3585, st)
    rps = {s.label_dict["band"]: s for s in out if s.name == "infercast_forecast_requests_per_second"}
    assert rps["point"].label_dict["forecaster"] == "combined_aci"
    assert rps["point"].value == pytest.approx(80.0, rel=0.02)


def test_prophet_anchored_is_a_traffic_model_on_request_and_refits_on_schedule():
    pytest.importorskip("prophet")
    st = MemoryStore()
    _fill(st, T0, T0 + 3600, rps=80.0)
    loop = PredictorLoop(_cfg(refit_interval_seconds=600.0), rps_model="prophet_anchored")
    out = loop.tick(T0 + 3585, st)
    rps = {s.label_dict["band"]: s.value for s in out if s.name == "infercast_forecast_requests_per_second"}
    assert rps["point"] == pytest.approx(80.0, rel=0.02)
    (sm,) = [v for k, v in loop._models.items() if k[0] == "rps"]
    assert sm.last_fit == T0 + 3585
    loop.tick(T0 + 3900, st)  # < 600 s later: no refit
    assert sm.last_fit == T0 + 3585


def test_counter_rate_is_reset_aware_and_smooths_a_late_scrape():
    from infercast.predictors.service import counter_rate

    # 10 req/s counted every 15 s; one scrape lands late (flat, then double), then the counter resets to 0.
    v = np.array([0, 150, 300, 300, 600, 750, 900, 1050, 1200, 150, 300, 450, 600], dtype=float)
    r = counter_rate(v, 15.0)  # over 4 intervals (60 s), like rate(x[1m])
    assert np.isnan(r[0])
    # The late scrape moves 150 requests from one interval to the next: a dip while the window holds the empty
    # interval without its double, a bump when it holds the double alone; otherwise exact.
    assert r[1:9].tolist() == pytest.approx([10, 10, 20 / 3, 10, 10, 10, 12.5, 10])
    assert r[9:].tolist() == pytest.approx([10] * 4)  # the restart counts from 0, never negative


def test_a_slow_prometheus_is_source_down_for_the_tick():
    import http.server
    import threading
    import time

    from infercast.store.prometheus import PrometheusStore

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(1.0)
            try:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")
            except OSError:
                pass  # the client gave up

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        out = _loop().tick(T0, PrometheusStore(f"http://127.0.0.1:{srv.server_port}", timeout_seconds=0.2))
    finally:
        srv.shutdown()
    assert {("", "kv", "source_down"), ("", "kv_max", "source_down"), ("", "rps", "source_down")} == _skips(out)
    assert _kv_point(out) is None


def test_shipped_model_trained_at_another_step_is_refused_with_the_reason(repo_root, caplog):
    assert registry.load_lstm()[0] is not None, "the shipped LSTM model file (predictors/models/) is missing"
    cfg = load_config(repo_root / "examples" / "flash-sale.yaml")
    cfg = cfg.model_copy(update={"predictor": _cfg(step_seconds=1.5)})
    with caplog.at_level(logging.WARNING):
        loop = PredictorLoop.from_config(cfg, rps_model="kalman")
    assert loop.lstm is None
    assert "trained at a 15 s step, predictor.step_seconds is 1.5" in caplog.text
    out = loop.tick(T0, MemoryStore())
    assert ("", "kv:lstm", "model_error") in _skips(out)


def test_a_fleet_on_a_faster_clock_gets_the_shipped_model_in_its_own_time(repo_root):
    """A twin at 10x (the accelerated test stacks): every predictor duration divided by 10 and `time_scale: 10`.
    The shipped LSTM serves it (without `time_scale` it is refused, as above), and forecasts exactly what it forecasts
    for the same fleet on the real clock: the same KV path, requests counted 10x faster per wall second."""
    fleet = load_config(repo_root / "examples" / "flash-sale.yaml").model_copy(update={"events": ()})
    s = 10.0
    real = _cfg(horizon_seconds=300.0)
    fast = _cfg(
        horizon_seconds=30.0,
        step_seconds=1.5,
        history_seconds=360.0,
        refit_interval_seconds=180.0,
        stale_after_seconds=12.0,
        time_scale=s,
    )
    kv = lambda k: 0.35 + 0.2 * np.sin(k / 9.0) + 0.002 * k  # noqa: E731 - the path, per 15 s step
    out = {}
    for name, pc, step in (("real", real, 15.0), ("fast", fast, 15.0 / s)):
        loop = PredictorLoop.from_config(fleet.model_copy(update={"predictor": pc}), rps_model="kalman")
        assert loop.lstm is not None and loop.lstm_error is None, name
        st = MemoryStore()
        for k in range(120):
            for inst in ("n1", "n2"):
                st.write(KV, {**POOL, "instance": inst}, T0 + k * step, kv(k))
                labels = {**POOL, "instance": inst, "priority": "normal", "outcome": "ok"}
                st.write(REQ, labels, T0 + k * step, 25.0 * 15.0 * k)  # 50 req/s of the fleet's time
        samples = loop.tick(T0 + 119 * step, st)
        out[name] = {
            (d["aggregate"], d["band"]): (d["forecaster"], round(x.value, 6))
            for x in samples
            if x.name == "infercast_forecast_kv_cache_usage_ratio" and (d := x.label_dict)["pool"] == "v4-main"
        }
    assert out["fast"] == out["real"] and out["real"][("max", "point")][0] == "lstm_aci", out


def test_on_a_faster_clock_the_step_is_compared_in_the_fleets_time(repo_root, caplog):
    """time_scale 10 with a 3 s step is a 30 s step of the fleet's time: the 15 s model is refused, and the log says
    which step it was offered."""
    cfg = load_config(repo_root / "examples" / "flash-sale.yaml")
    cfg = cfg.model_copy(update={"predictor": _cfg(step_seconds=3.0, horizon_seconds=30.0, time_scale=10.0)})
    with caplog.at_level(logging.WARNING):
        loop = PredictorLoop.from_config(cfg, rps_model="kalman")
    assert loop.lstm is None
    assert "trained at a 15 s step, predictor.step_seconds is 3 (x time_scale 10)" in caplog.text


def test_shipped_model_is_the_kv_model_by_default(repo_root):
    lstm, _ = registry.load_lstm()
    assert lstm is not None, "the shipped LSTM model file (predictors/models/) is missing"
    loop = PredictorLoop.from_config(load_config(repo_root / "examples" / "flash-sale.yaml"), rps_model="kalman")
    assert loop.lstm is not None and loop.lstm_error is None
    st = MemoryStore()
    _fill(st, T0, T0 + 3600, kv=lambda t: 0.3 + 0.1 * np.sin((t - T0) / 600))
    out = loop.tick(T0 + 3585, st)
    kv = {s.label_dict["band"]: s for s in out if s.name == "infercast_forecast_kv_cache_usage_ratio"}
    assert kv["point"].label_dict["forecaster"] == "lstm_aci"  # the shipped LSTM, its band calibrated online
    assert 0.0 <= kv["lower"].value <= kv["point"].value <= kv["upper"].value <= 1.0


def test_a_failing_model_is_logged_once_not_every_tick(caplog):
    class Exploding:
        name = "lstm"

        def fit(self, histories):
            return self

        def forecast(self, history, horizon_s):
            raise RuntimeError("shape mismatch")

    st = MemoryStore()
    _fill(st, T0, T0 + 3600)
    loop = _loop(lstm=Exploding())
    with caplog.at_level(logging.WARNING, logger="infercast.predictors.service"):
        for k in range(3):
            out = loop.tick(T0 + 3555 + 15 * k, st)
            assert ("v4-main", "kv:lstm_aci", "model_error") in _skips(out)  # reported on every tick, as a metric
    assert caplog.text.count("lstm_aci for kv v4-main/v4 failed: shape mismatch; using kalman") == 1


def test_restart_forecasts_on_the_first_tick_from_the_stores_history():
    """A predictor (re)started beside a Prometheus that holds history is not blind: its first tick backfills the
    last `history_seconds` with `query_range` and publishes forecasts for the pool's mean and its fullest instance,
    the fullest one higher when one instance runs hotter than the other."""
    st = MemoryStore()
    for t in np.arange(T0, T0 + 3600, 15.0):
        st.write(KV, {**POOL, "instance": "n1"}, t, 0.35)
        st.write(KV, {**POOL, "instance": "n2"}, t, 0.65)  # the hot one
    fresh = _loop()  # nothing remembered: a new process
    out = fresh.tick(T0 + 3585, st)
    point = {
        s.label_dict["aggregate"]: s.value
        for s in out
        if s.name == "infercast_forecast_kv_cache_usage_ratio" and s.label_dict["band"] == "point"
    }
    assert point["mean"] == pytest.approx(0.5, abs=0.01)
    assert point["max"] == pytest.approx(0.65, abs=0.01)
    assert not any(r == "too_short" for _, _, r in _skips(out))


def test_an_announced_rate_is_spread_over_the_pools_as_todays_traffic_is():
    """The calendar announces 12,000 req/s fleet-wide; the pools take 300 and 100 req/s now: their traffic
    forecasts over the sale are 9,000 and 3,000."""
    import datetime as dt

    from infercast.config import Event

    def iso(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.UTC).isoformat()

    sale = Event(name="sale", start=iso(T0 + 3700), end=iso(T0 + 5000), expected_rps=12000)
    st = MemoryStore()
    _fill(st, T0, T0 + 3600, rps=300.0)
    _fill(st, T0, T0 + 3600, rps=100.0, pool={"pool": "v4-long", "version": "v4"})
    loop = PredictorLoop(_cfg(), trigger=0.75, rps_model="kalman", events=(sale,))
    out = loop.tick(T0 + 3585, st)
    point = {
        s.label_dict["pool"]: s.value
        for s in out
        if s.name == "infercast_forecast_requests_per_second" and s.label_dict["band"] == "point"
    }
    assert point == {"v4-main": pytest.approx(9000.0, rel=0.01), "v4-long": pytest.approx(3000.0, rel=0.01)}
    calm = PredictorLoop(_cfg(), trigger=0.75, rps_model="kalman").tick(T0 + 3585, st)
    assert max(s.value for s in calm if s.name == "infercast_forecast_requests_per_second") < 1000.0
