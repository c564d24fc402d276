"""A fleet's own history from Prometheus, as the deployed predictor reads it: the training data of
`infercast train --from-prometheus URL` (`infercast.predictors.train_prometheus`).

What is read, and how, comes from the predictor itself, so training and serving cannot drift apart:
- KV usage per (pool, version), both aggregates the predictor forecasts (`infercast.predictors.service.SERIES`): the
  pool's fullest instance (`max`, what the predictive alert and the actuator act on) and its mean.  With
  `source="rules"` from the recording rules `infercast.alertrules.rules.KV_USAGE_MAX` / `KV_USAGE_AVG` (names built from
  the catalog); with `source="raw"` from the raw `infercast_kv_cache_usage_ratio`, combined over instances by the
  predictor's own `align_many`; `source="auto"` takes the rules when they hold enough history and the raw metric
  otherwise (the predictor's tick makes the same choice for the window it reads: `PredictorLoop.kv_source`)
  (recording rules are not evaluated retroactively: a rule loaded yesterday has one day, however long the raw
  metric's retention; `promtool tsdb create-blocks-from rules` backfills them).
- The LSTM's covariates (`infercast.predictors.service.COVARIATE_METRICS`: running, waiting, fragmentation) and the
  traffic (`rps`: the rate of `infercast_router_requests_total` summed per pool and version, the predictor's
  `counter_rate`), each left out when Prometheus has none (the model masks a missing covariate; Prophet is then
  not fitted).
All on the predictor's step grid, over [start, end].  These are the exporter's series; with the fleet file's
`metrics.source: engines` (`fetch(..., inputs=SourceSeries.of("engines"))`) the engine recording rules' instead:
`pool_version:engine_kv_cache_usage:max/avg`, the per-engine `instance:engine_kv_cache_usage:ratio` as the raw
fallback, `instance:engine_requests_running:count` / `_waiting:count` for those covariates and
`pool_version:engine_requests:rate5m` for traffic (`infercast.predictors.service.SourceSeries`).

`split_times` cuts the common time axis into train / validation / held-out tail: by time, never shuffled, so no
window of a later part is ever seen by an earlier one.  Pure apart from the store it is handed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from infercast.predictors.base import History
from infercast.predictors.service import (
    KV_SOURCES,
    SERIES,
    AlignedMatrix,
    SourceSeries,  # what the predictor reads, by metrics.source: its KV rules, raw KV metric, covariates, traffic
    align_many,
    align_matrix,
)
from infercast.store import Series, Store, StoreError

#: the KV aggregates in the order they are reported: the fullest instance first (what pages)
KV_AGGREGATES: tuple[str, ...] = tuple(
    sorted((how for _, kind, _, how, _ in SERIES if kind == "kv"), key=lambda a: a != "max")
)
SOURCES = KV_SOURCES


class HistoryError(Exception):
    """The history cannot be read or has no KV series; the message says what was asked and what came back."""


@dataclass
class FleetHistory:
    """KV usage (per aggregate, one `History` per (pool, version), covariates attached) and traffic, on one grid."""

    t: np.ndarray
    kv: dict[str, list[History]]
    rps: list[History]
    source: str  # "rules" or "raw"
    metrics: dict[str, str]  # what was queried: aggregate or covariate -> metric name
    notes: list[str] = field(default_factory=list)

    @property
    def step(self) -> float:
        return float(self.t[1] - self.t[0]) if len(self.t) > 1 else 0.0

    def groups(self) -> list[tuple[str, str]]:
        return sorted({_group(h) for hs in self.kv.values() for h in hs})

    def observed(self) -> tuple[float, float, int]:
        """(first, last) time any KV series has a finite value, and the most finite samples one series has."""
        first, last, most = math.inf, -math.inf, 0
        for hs in self.kv.values():
            for h in hs:
                ok = np.isfinite(h.y)
                if ok.any():
                    first = min(first, float(h.t[ok][0]))
                    last = max(last, float(h.t[ok][-1]))
                    most = max(most, int(ok.sum()))
        return first, last, most


def _group(h: History) -> tuple[str, str]:
    _, pool, version = h.series_id.split("/", 2)
    return pool, version


def _query(store: Store, metric: str, matchers: dict[str, str] | None, t: np.ndarray) -> list[Series]:
    return store.query_range(metric, matchers or None, float(t[0]), float(t[-1]), float(t[1] - t[0]))


def _rows(m: AlignedMatrix) -> dict[tuple[str, str], np.ndarray]:
    return {g: m.y[i] for i, g in enumerate(m.groups)}


def _span_s(rows: dict[tuple[str, str], np.ndarray], t: np.ndarray) -> float:
    """Seconds from the first to the last finite value over all rows (0 when none)."""
    firsts, lasts = [], []
    for y in rows.values():
        ok = np.nonzero(np.isfinite(y))[0]
        if len(ok):
            firsts.append(t[ok[0]])
            lasts.append(t[ok[-1]])
    return float(max(lasts) - min(firsts)) if firsts else 0.0


def fetch(
    store: Store,
    start: float,
    end: float,
    step: float,
    matchers: dict[str, str] | None = None,
    source: str = "auto",
    need_s: float = 0.0,
    inputs: SourceSeries | None = None,
) -> FleetHistory:
    """Read the fleet's history over [start, end] on the grid `start + k * step` (see the module docstring).

    `inputs`: the series the predictor reads (`SourceSeries.of(metrics.source)`: the exporter's, the default, or the
    engine recording rules'), so training reads what serving will.

    `need_s`: with `source="auto"`, the recording rules are used when they span at least this long (or as long as
    the raw metric).  Raises `HistoryError` when Prometheus cannot answer or holds no KV series.
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    g0 = math.ceil(start / step) * step
    n = math.floor((end - g0) / step + 1e-9) + 1
    if n < 2:
        raise HistoryError(f"the range [{start:.0f}, {end:.0f}] holds fewer than two {step:g} s steps")
    t = g0 + step * np.arange(n)
    ins = inputs or SourceSeries.of()
    kv_rules, kv_raw = ins.kv_rules, ins.kv
    notes: list[str] = []
    metrics: dict[str, str] = {}
    try:
        kv, used = _read_kv(store, source, ins, matchers, (t, g0, step), need_s, notes)
        for how in KV_AGGREGATES:
            metrics[f"kv_{how}"] = kv_rules[how] if used == "rules" else f"{how} by (pool, version) ({kv_raw})"
        if not kv[KV_AGGREGATES[0]]:
            raise HistoryError(
                f"Prometheus has no series of {kv_raw}"
                + ("" if source == "raw" else f" nor of the recording rule {kv_rules[KV_AGGREGATES[0]]}")
                + f" with pool and version labels{_where(matchers)} between {_iso(t[0])} and {_iso(t[-1])}: is the "
                "exporter (or the engines' PodMonitor and the recording rules) scraped by this Prometheus?"
            )
        covs: dict[str, dict[tuple[str, str], np.ndarray]] = {}
        for name, (metric, how) in ((k, v) for k, v in ins.covariates.items() if k != "rps"):
            rows = _rows(align_matrix(_query(store, metric, matchers, t), g0, step, n, how))
            if rows:
                covs[name] = rows
                metrics[name] = f"{how} by (pool, version) ({metric})"
        rps_metric, rps_how = ins.rps
        rps = _rows(align_matrix(_query(store, rps_metric, matchers, t), g0, step, n, rps_how))
    except StoreError as e:
        raise HistoryError(f"cannot read the history from Prometheus: {e}") from None
    if rps:
        covs["rps"] = rps
        metrics["rps"] = (
            f"rate of {rps_metric} summed by (pool, version), as the predictor computes it"
            if rps_how == "rate"
            else f"{rps_metric}, the engines' rate as recorded"
        )
    else:
        notes.append(f"no {rps_metric}: no traffic series, so Prophet is not fitted")
    out_kv: dict[str, list[History]] = {}
    for how in KV_AGGREGATES:
        out_kv[how] = [
            History(t, y, {c: rows[g] for c, rows in covs.items() if g in rows}, f"kv_{how}/{g[0]}/{g[1]}")
            for g, y in sorted(kv[how].items())
        ]
    rps_h = [History(t, y, {}, f"rps/{g[0]}/{g[1]}") for g, y in sorted(rps.items()) if np.isfinite(y).sum() > 2]
    return FleetHistory(t, out_kv, rps_h, used, metrics, notes)


def _read_kv(
    store: Store,
    source: str,
    ins: SourceSeries,
    matchers: dict[str, str] | None,
    grid: tuple[np.ndarray, float, float],
    need_s: float,
    notes: list[str],
) -> tuple[dict[str, dict[tuple[str, str], np.ndarray]], str]:
    """KV usage per aggregate and (pool, version) on the grid (`t`, its start and step), and where it came from
    (`rules` or `raw`): the recording rules when `source` says so, or (`auto`) when they span `need_s` or as long as
    the raw metric; why not, in `notes`."""
    t, g0, step = grid
    n = len(t)
    kv_rules, kv_raw = ins.kv_rules, ins.kv
    kv: dict[str, dict[tuple[str, str], np.ndarray]] = {}
    used = "raw"
    if source in ("auto", "rules"):
        rules = {how: _rows(align_matrix(_query(store, kv_rules[how], matchers, t), g0, step, n, "max"))
                 for how in KV_AGGREGATES}  # fmt: skip
        rule_span = _span_s(rules[KV_AGGREGATES[0]], t)
        if source == "rules":
            if not rules[KV_AGGREGATES[0]]:
                raise HistoryError(
                    f"the recording rule {kv_rules[KV_AGGREGATES[0]]} has no series"
                    + _where(matchers)
                    + " (load the recording rules, or use --source raw)"
                )
            kv, used = rules, "rules"
        elif rules[KV_AGGREGATES[0]] and rule_span >= need_s:
            kv, used = rules, "rules"
        else:
            raw = _raw_kv(store, kv_raw, matchers, t, g0, step, n)
            if rules[KV_AGGREGATES[0]] and _span_s(raw[KV_AGGREGATES[0]], t) <= rule_span:
                kv, used = rules, "rules"
            else:
                kv = raw
                notes.append(
                    f"the recording rule {kv_rules[KV_AGGREGATES[0]]} "
                    + (f"spans only {rule_span / 3600:.1f} h" if rules[KV_AGGREGATES[0]] else "has no series")
                    + f"; read {kv_raw} combined over instances as the predictor does "
                    "(recording rules are not evaluated retroactively: `promtool tsdb create-blocks-from rules` "
                    "backfills them)"
                )
    else:
        kv = _raw_kv(store, kv_raw, matchers, t, g0, step, n)
    return kv, used


def _raw_kv(
    store: Store, metric: str, matchers, t, g0: float, step: float, n: int
) -> dict[str, dict[tuple[str, str], np.ndarray]]:
    raw = _query(store, metric, matchers, t)
    return {how: _rows(m) for how, m in align_many(raw, g0, step, n, KV_AGGREGATES).items()}


def _where(matchers: dict[str, str] | None) -> str:
    return f" matching {matchers}" if matchers else ""


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Split:
    """[first, val) trains, [val, test) validates (early stopping), [test, last] is held out for the score."""

    first: float
    val: float
    test: float
    last: float

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "train": [_iso(self.first), _iso(self.val)],
            "validation": [_iso(self.val), _iso(self.test)],
            "held_out": [_iso(self.test), _iso(self.last)],
        }


def split_times(first: float, last: float, val_fraction: float, holdout_fraction: float, step: float) -> Split:
    """Cut [first, last] by time: the last `holdout_fraction` held out, the `val_fraction` before it validates."""
    if not (0 < val_fraction < 1 and 0 < holdout_fraction < 1 and val_fraction + holdout_fraction < 0.9):
        raise ValueError("fractions must be positive and leave at least 10% to train")
    span = last - first
    test = first + math.floor(span * (1 - holdout_fraction) / step) * step
    val = first + math.floor(span * (1 - holdout_fraction - val_fraction) / step) * step
    return Split(first, val, test, last)


def window(h: History, a: float, b: float) -> History:
    """The samples of `h` with a <= t < b (b = inf: to the end)."""
    i, j = int(np.searchsorted(h.t, a, side="left")), int(np.searchsorted(h.t, b, side="left"))
    return History(h.t[i:j], h.y[i:j], {k: v[i:j] for k, v in h.features.items()}, h.series_id)


def distinct(hs: list[History], others: list[History]) -> list[History]:
    """`hs` without the histories equal to one in `others` with the same (pool, version): a one-instance pool's mean
    is its maximum, and training on both would count it twice."""
    by_group = {_group(o): o.y for o in others}
    keep = []
    for h in hs:
        o = by_group.get(_group(h))
        if o is None or not np.array_equal(np.nan_to_num(o, nan=-1.0), np.nan_to_num(h.y, nan=-1.0)):
            keep.append(h)
    return keep
