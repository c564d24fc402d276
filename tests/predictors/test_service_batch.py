"""The batched tick forecasts exactly what the per-series path does (issue 25).

`PredictorLoop(batched=True)` (the default) sends every KV series, both aggregates, through one LSTM pass per tick,
the online band and the calendar prior in numpy; `batched=False` runs the pipeline of `infercast.predictors.deployed`
one series at a time, as the service always did.  Driven side by side on the same store for many ticks (so the bands
learn from outcomes), they must publish the same samples with values equal to 1e-5, on a fleet with everything the
per-series path handles: several instances per pool, covariates for some pools only, holes, NaN, a pool that
appears late and one that goes away, and a calendar event.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from infercast.catalog import (
    KV_CACHE_FRAGMENTATION_RATIO,
    KV_CACHE_USAGE_RATIO,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    ROUTER_REQUESTS_TOTAL,
)
from infercast.config import PredictorConfig
from infercast.predictors import registry
from infercast.predictors.prophet_model import EventWindow
from infercast.predictors.service import PredictorLoop, align, align_matrix, check_input, check_inputs
from infercast.predictors.timescale import TimeScaled
from infercast.store import Series

T0 = 1_800_000_000.0
TOL = 1e-5


class ArrayStore:
    """Whole series in memory; `query_range` returns what a store holds up to `end` (nothing from the future)."""

    def __init__(self) -> None:
        self.data: dict[str, list[tuple[dict[str, str], np.ndarray, np.ndarray]]] = {}

    def add(self, metric: str, labels: dict[str, str], t: np.ndarray, v: np.ndarray) -> None:
        self.data.setdefault(metric, []).append((labels, t, v))

    def query_range(self, metric, matchers, start, end, step) -> list[Series]:
        out = []
        for labels, t, v in self.data.get(metric, []):
            keep = (t >= start - step) & (t <= end)
            if keep.any():
                out.append(Series(labels, t[keep], v[keep]))
        return out


def _fleet(pools: int, step: float, seed: int = 25) -> ArrayStore:
    rng = np.random.default_rng(seed)
    t = T0 + step * np.arange(0, 400)
    st = ArrayStore()
    for p in range(pools):
        pool = {"pool": f"p{p:02d}", "version": f"v{p % 2}"}
        level = 0.2 + 0.6 * p / pools
        for inst in range(1 + p % 3):
            walk = np.cumsum(rng.normal(0, 0.01, t.size)) + 0.05 * np.sin(t / (600 + 90 * p)) * (1 + inst)
            kv = np.clip(level + walk + (0.25 if p % 5 == 0 else 0.0) * (t > T0 + step * 250), 0, 1)
            if p % 7 == 3:
                kv[150:170] = np.nan  # a hole longer than stale_after: the history starts after it
            if p % 11 == 4:
                kv[rng.random(t.size) < 0.2] = np.nan  # scattered NaN
            keep = np.ones(t.size, bool)
            if p == 1:
                keep[:300] = False  # a pool that appears late
            if p == 2:
                keep[320:] = False  # and one that goes away
            st.add(KV_CACHE_USAGE_RATIO, {**pool, "instance": f"n{inst}"}, t[keep], kv[keep])
            if p % 4 != 1:  # some pools give no covariates: the model masks them
                st.add(REQUESTS_RUNNING, {**pool, "instance": f"n{inst}"}, t, 20 + 10 * rng.random(t.size))
                st.add(REQUESTS_WAITING, {**pool, "instance": f"n{inst}"}, t, 5 * rng.random(t.size))
                st.add(KV_CACHE_FRAGMENTATION_RATIO, {**pool, "instance": f"n{inst}"}, t, 0.1 + 0.05 * kv)
                counter = np.cumsum(rng.poisson(30 * step, t.size)).astype(float)
                counter[200:] -= counter[200]  # a restart
                labels = {**pool, "instance": f"n{inst}", "priority": "normal", "outcome": "ok"}
                st.add(ROUTER_REQUESTS_TOTAL, labels, t, counter)
    return st


def _by_key(samples) -> dict:
    return {(s.name, s.labels): s.value for s in samples}


def _same(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))[:6]
    worst = 0.0
    for k, va in a.items():
        vb = b[k]
        if math.isinf(va) or math.isinf(vb):
            assert va == vb, k
        else:
            worst = max(worst, abs(va - vb))
    return worst


def _lstm():
    lstm, note = registry.load_lstm()
    assert lstm is not None, note
    import torch

    torch.set_num_threads(1)
    return lstm


@pytest.mark.parametrize("scale", [1.0, 2.0], ids=["real-time", "time-scaled"])
def test_the_batched_tick_forecasts_what_the_per_series_path_does(scale):
    step = 15.0 / scale
    cfg = PredictorConfig(
        history_seconds=3600.0 / scale,
        step_seconds=step,
        horizon_seconds=300.0 / scale,
        stale_after_seconds=120.0 / scale,
        time_scale=scale,
        event_onset_seconds=30.0 / scale,
    )
    lstm = _lstm()
    model = TimeScaled(lstm, scale) if scale != 1.0 else lstm
    events = [EventWindow("sale", T0 + step * 300, T0 + step * 340)]
    st = _fleet(24, step)
    kw = {"trigger": 0.75, "events": events, "lstm": model, "rps_model": "kalman"}
    batched, single = PredictorLoop(cfg, batched=True, **kw), PredictorLoop(cfg, batched=False, **kw)
    assert batched._batch_model() is not None and single._batch_model() is None
    worst, published, widened, ceiling = 0.0, 0, False, False
    for k in range(200, 400, 2):  # every other step: forecasts resolve on and between ticks
        now = T0 + step * k
        a, b = batched.tick(now, st), single.tick(now, st)
        worst = max(worst, _same(_by_key(a), _by_key(b)))
        published += sum(s.name == "infercast_forecast_kv_cache_usage_ratio" for s in a)
        ceiling |= any(s.value == 1.0 and ("band", "upper") in s.labels for s in a)
        assert "lstm_aci" in {s.label_dict.get("forecaster") for s in a}
    for key, sm in single._models.items():
        if key[0].startswith("kv"):
            band = sm.model.inner  # EventPrior(AdaptiveBand(...))
            assert batched._kv_bank.factors(key) == pytest.approx(band.factors, abs=1e-9), key
            widened |= band.factors != (1.0, 1.0)
    assert worst <= TOL, worst
    # the comparison covered forecasts, bands that moved, and the prior at the ceiling
    assert published > 2000 and widened and ceiling, (published, widened, ceiling)
    print(f"scale {scale}: max |batched - per-series| = {worst:.2e} over {published} forecast samples")


def test_align_matrix_and_check_inputs_agree_with_the_per_series_functions():
    rng = np.random.default_rng(3)
    step, n = 15.0, 120
    g0 = T0
    t = g0 + step * np.arange(n)
    series = []
    for i in range(60):
        m = int(rng.integers(0, n + 10))
        ts = np.sort(rng.choice(t, size=min(m, n), replace=False)) + rng.normal(0, 2, min(m, n))
        v = rng.random(ts.size)
        v[rng.random(ts.size) < 0.1] = np.nan
        v[rng.random(ts.size) < 0.02] = np.inf
        labels = {"pool": f"p{i % 17}", "version": f"v{i % 2}", "instance": f"n{i}"}
        series.append(Series(labels, ts, v))
    series.append(Series({"version": "v0"}, t, t))  # no pool: ignored
    # as many points as the grid but not on it: one step late (the last past the end), and two in one slot
    series.append(Series({"pool": "p0", "version": "v0", "instance": "late"}, t + step, rng.random(n)))
    doubled = t.copy()
    doubled[5] = doubled[4] + 1.0
    series.append(Series({"pool": "p1", "version": "v1", "instance": "doubled"}, doubled, rng.random(n)))
    for how in ("mean", "max", "sum", "rate"):
        am = align_matrix(series, g0, step, n, how)
        assert am.groups == sorted(am.groups)
        ref = _reference_align(series, g0, step, n, how)
        assert set(am.groups) == set(ref)
        got = align(series, g0, step, n, how)
        for g, a in ref.items():
            np.testing.assert_allclose(got[g].y, a[0], rtol=1e-12, atol=1e-12, equal_nan=True)
            assert (got[g].raw_points, got[g].raw_nonfinite, got[g].last_raw_t) == a[1:]
        for now in (t[-1], t[-1] + 100, t[-1] + 500):
            for min_points, stale in ((20, 120.0), (5, 30.0), (200, 1e9)):
                reasons, starts = check_inputs(t, am, now, min_points, stale)
                for i in range(len(am.groups)):
                    assert (reasons[i], int(starts[i])) == check_input(t, am.row(i), now, min_points, stale)


def _reference_align(series, g0, step, n, how):
    """The per-series `align` before the matrix version (issue 25), kept here as the reference."""
    from infercast.predictors.service import counter_rate

    acc, stats = {}, {}
    for s in series:
        pool, version = s.labels.get("pool"), s.labels.get("version", "")
        if not pool:
            continue
        key = (pool, version)
        arr = np.full(n, np.nan)
        k = np.rint((s.t - g0) / step).astype(int)
        ok = (k >= 0) & (k < n)
        arr[k[ok]] = s.v[ok]
        st = stats.setdefault(key, [0, 0, -math.inf])
        st[0] += int(ok.sum())
        st[1] += int((~np.isfinite(s.v[ok])).sum())
        if ok.any():
            st[2] = max(st[2], float(s.t[ok].max()))
        arr[~np.isfinite(arr)] = np.nan
        if how == "rate":
            arr = counter_rate(arr, step)
        acc.setdefault(key, []).append(arr)
    out = {}
    for key, arrs in acc.items():
        m = np.vstack(arrs)
        have = np.isfinite(m).any(axis=0)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            y = {"mean": np.nanmean, "max": np.nanmax}.get(how, np.nansum)(m, axis=0)
        out[key] = (np.where(have, y, np.nan), *stats[key])
    return out


def test_a_series_the_batched_pass_cannot_forecast_falls_back_alone(caplog):
    """A non-finite forecast for one series (a model gone wrong on odd input): that series says `model_error` for
    the LSTM and is forecast by the fallback baseline, as on the per-series path; the others are not touched."""
    cfg = PredictorConfig(history_seconds=3600.0)
    lstm = _lstm()
    st = _fleet(6, 15.0)
    loop = PredictorLoop(cfg, trigger=0.75, lstm=lstm, rps_model="kalman")
    # every row its own window: the first group has one instance, so its mean and max are one window, which the pass
    # otherwise forecasts once (tests/predictors/test_kv_dedupe.py) and a poisoned row would poison both
    loop.dedupe_windows = False
    real = lstm.start_windows  # the pass the tick starts (`forecast_windows` in two halves)

    class Poisoned:
        def __init__(self, under_way) -> None:
            self.under_way = under_way

        def result(self):
            out = self.under_way.result()
            out[0] = np.nan  # the first row: kv for the first group
            return out

    lstm.start_windows = lambda raw, dt, *a, **kw: Poisoned(real(raw, dt, *a, **kw))
    try:
        out = loop.tick(T0 + 15.0 * 320, st)
    finally:
        del lstm.start_windows
    first = min(g for s in out if "pool" in s.label_dict for g in [s.label_dict["pool"]] if g)
    skipped = {(s.label_dict["pool"], s.label_dict["series"]) for s in out if s.name == "infercast_forecast_skipped"}
    assert (first, "kv:lstm_aci") in skipped and (first, "kv_max:lstm_aci") not in skipped
    models = {
        (s.label_dict["pool"], s.label_dict["aggregate"]): s.label_dict["forecaster"]
        for s in out
        if s.name == "infercast_forecast_kv_cache_usage_ratio"
    }
    assert models[(first, "mean")] == registry.BEST_BASELINE["kv"]
    assert {m for k, m in models.items() if k != (first, "mean")} == {"lstm_aci"}
    assert "lstm_aci for kv" in caplog.text and "non-finite forecast" in caplog.text
