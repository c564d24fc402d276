"""The daemon's own metrics (`infercast_actuator_*`, names, help and labels from infercast/catalog.py).

`ActuatorMetrics` keeps plain numbers under a lock; `collect()` renders them as fresh metric families on each
scrape (prometheus_client's custom-collector pattern), so only catalog series are served -- no `_created`
companions, nothing a dashboard or rule does not know.  `record(report, loop)` publishes what a tick reports;
`leadership(...)`, `tick(...)` and `webhook(...)` what the daemon itself sees.  The settings gauges
(`infercast_actuator_pool_weight`, `..._breaker_threshold`) follow what was *applied* (or rolled back to), never
an advisory decision: they are the state the actuator last set.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from infercast.actuators.actions import Action, SetAdmission, SetBreakerThreshold, SetPoolWeight
from infercast.actuators.tick import TickReport
from infercast.actuators.webhook import Offer
from infercast.catalog import (
    ACTUATOR_ACTIONS_TOTAL,
    ACTUATOR_ACTIVE,
    ACTUATOR_AUDIT_FAILED,
    ACTUATOR_AUDIT_UNKNOWN,
    ACTUATOR_AUDIT_UNRECORDED_TOTAL,
    ACTUATOR_BREAKER_THRESHOLD,
    ACTUATOR_CHANGE_BUDGET_USED_RATIO,
    ACTUATOR_DECISION_LATENCY_SECONDS,
    ACTUATOR_DECISIONS_TOTAL,
    ACTUATOR_FENCED,
    ACTUATOR_FREEZES_TOTAL,
    ACTUATOR_FROZEN,
    ACTUATOR_LEADER,
    ACTUATOR_LOOPS,
    ACTUATOR_POOL_WEIGHT,
    ACTUATOR_TICKS_TOTAL,
    ACTUATOR_VERDICTS_TOTAL,
    ACTUATOR_WEBHOOK_ALERTS_TOTAL,
    TICK_OUTCOMES,
    Kind,
    spec,
)

#: decision-to-answer latency buckets (seconds): the goal is 1 s; retries with backoff can take several
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: SetAdmission's fields as `kind` values of infercast_actuator_breaker_threshold{pool="fleet"}
ADMISSION_KINDS = {
    "memory_limit": "memory",
    "max_context_tokens": "context_tokens",
    "normal_queue_seconds": "normal_queue",
    "low_queue_seconds": "low_queue",
}
FAMILIES = (
    ACTUATOR_ACTIONS_TOTAL,
    ACTUATOR_DECISIONS_TOTAL,
    ACTUATOR_VERDICTS_TOTAL,
    ACTUATOR_FREEZES_TOTAL,
    ACTUATOR_TICKS_TOTAL,
    ACTUATOR_WEBHOOK_ALERTS_TOTAL,
    ACTUATOR_POOL_WEIGHT,
    ACTUATOR_BREAKER_THRESHOLD,
    ACTUATOR_LEADER,
    ACTUATOR_ACTIVE,
    ACTUATOR_FROZEN,
    ACTUATOR_FENCED,
    ACTUATOR_CHANGE_BUDGET_USED_RATIO,
    ACTUATOR_DECISION_LATENCY_SECONDS,
    ACTUATOR_AUDIT_FAILED,
    ACTUATOR_AUDIT_UNKNOWN,
    ACTUATOR_AUDIT_UNRECORDED_TOTAL,
)


class ActuatorMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # family -> label values (in the catalog's label order) -> value
        self._values: dict[str, dict[tuple[str, ...], float]] = {name: {} for name in FAMILIES}
        for name in (
            ACTUATOR_LEADER, ACTUATOR_ACTIVE, ACTUATOR_FROZEN, ACTUATOR_FENCED, ACTUATOR_AUDIT_FAILED,
            ACTUATOR_AUDIT_UNKNOWN, ACTUATOR_AUDIT_UNRECORDED_TOTAL,
        ):  # fmt: skip
            self._values[name][()] = 0.0
        for loop in ACTUATOR_LOOPS:  # every known series from 0, so a rate() sees the first error or missed run
            for outcome in TICK_OUTCOMES:
                self._values[ACTUATOR_TICKS_TOTAL][(loop, outcome)] = 0.0
        self._hist: dict[tuple[str, ...], list[float]] = defaultdict(lambda: [0.0] * (len(LATENCY_BUCKETS) + 1))
        self._hist_sum: dict[tuple[str, ...], float] = defaultdict(float)
        self._frozen_reason: str | None = None
        self.registry = CollectorRegistry()
        self.registry.register(self)

    # --- what the daemon sees ------------------------------------------------------------------------------
    def leadership(self, is_leader: bool, active: bool) -> None:
        with self._lock:
            self._values[ACTUATOR_LEADER][()] = 1.0 if is_leader else 0.0
            self._values[ACTUATOR_ACTIVE][()] = 1.0 if active else 0.0

    def fenced(self, fenced: bool) -> None:
        with self._lock:
            self._values[ACTUATOR_FENCED][()] = 1.0 if fenced else 0.0

    def audit(self, failed: bool, unknown: int | None, unrecorded: int) -> None:
        """The audit trail's health: broken (page), rows of unknown outcome (None: unchanged), rows not written."""
        with self._lock:
            self._values[ACTUATOR_AUDIT_FAILED][()] = 1.0 if failed else 0.0
            if unknown is not None:
                self._values[ACTUATOR_AUDIT_UNKNOWN][()] = float(unknown)
            self._values[ACTUATOR_AUDIT_UNRECORDED_TOTAL][()] = float(unrecorded)

    def tick(self, loop: str, outcome: str) -> None:
        with self._lock:
            self._inc(ACTUATOR_TICKS_TOTAL, loop, outcome)

    def webhook(self, offer: Offer) -> None:
        with self._lock:
            for outcome, n in (
                ("accepted", offer.accepted),
                ("duplicate", offer.duplicates),
                ("dropped", offer.dropped),
            ):
                if n:
                    self._inc(ACTUATOR_WEBHOOK_ALERTS_TOTAL, outcome, by=n)

    # --- what a tick reports ----------------------------------------------------------------------------------
    def record(self, report: TickReport, loop: str) -> None:
        with self._lock:
            for a in report.actions:
                kind, target = a.action.kind, a.action.target
                self._inc(ACTUATOR_ACTIONS_TOTAL, kind, target, a.outcome)
                self._inc(ACTUATOR_DECISIONS_TOTAL, kind, target, a.reason)
                if a.outcome in ("applied", "rolled_back"):
                    self._settings(a.action)
                if a.outcome != "advisory" and a.decided_at is not None and a.answered_at is not None:
                    self._observe((loop,), max(0.0, a.answered_at - a.decided_at))
            for v in report.verdicts:
                self._inc(ACTUATOR_VERDICTS_TOTAL, v.action.kind, v.action.target, v.verdict)
            if report.frozen and report.freeze_reason != self._frozen_reason:
                self._inc(
                    ACTUATOR_FREEZES_TOTAL, str(report.freeze_reason)
                )  # a freeze counts once, not once per frozen tick
            self._frozen_reason = report.freeze_reason if report.frozen else None
            self._values[ACTUATOR_FROZEN][()] = 1.0 if report.frozen else 0.0
            for target, used in report.budget_used.items():
                self._values[ACTUATOR_CHANGE_BUDGET_USED_RATIO][(target,)] = float(used)

    def _settings(self, action: Action) -> None:
        if isinstance(action, SetPoolWeight):
            self._values[ACTUATOR_POOL_WEIGHT][(action.pool,)] = action.weight
        elif isinstance(action, SetBreakerThreshold):
            self._values[ACTUATOR_BREAKER_THRESHOLD][(action.pool, "latency")] = action.seconds
        elif isinstance(action, SetAdmission):
            for field, kind in ADMISSION_KINDS.items():
                v = getattr(action, field)
                if v is not None:
                    self._values[ACTUATOR_BREAKER_THRESHOLD][("fleet", kind)] = float(v)

    def _inc(self, family: str, *labels: str, by: float = 1.0) -> None:
        values = self._values[family]
        values[labels] = values.get(labels, 0.0) + by

    def _observe(self, labels: tuple[str, ...], seconds: float) -> None:
        self._hist[labels][bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self._hist_sum[labels] += seconds

    # --- scraping -------------------------------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        with self._lock:
            values = {name: dict(v) for name, v in self._values.items()}
            hist = {k: list(v) for k, v in self._hist.items()}
            sums = dict(self._hist_sum)
        for name in FAMILIES:
            m = spec(name)
            if m.kind is Kind.HISTOGRAM:
                fam = HistogramMetricFamily(m.name, m.help, labels=m.labels)
                for labels, counts in sorted(hist.items()):
                    cum, buckets = 0.0, []
                    for le, n in zip((*LATENCY_BUCKETS, float("inf")), counts, strict=True):
                        cum += n
                        buckets.append(("+Inf" if le == float("inf") else repr(le), cum))
                    fam.add_metric(list(labels), buckets, sums[labels])
            elif m.kind is Kind.COUNTER:
                fam = CounterMetricFamily(m.name.removesuffix("_total"), m.help, labels=m.labels)
                for labels, v in sorted(values[name].items()):
                    fam.add_metric(list(labels), v)
            else:
                fam = GaugeMetricFamily(m.name, m.help, labels=m.labels)
                for labels, v in sorted(values[name].items()):
                    fam.add_metric(list(labels), v)
            yield fam

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
