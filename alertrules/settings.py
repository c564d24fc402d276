"""Every number the alert rules use, in one place.

The policy thresholds come from `infercast.config.Thresholds` and `PredictorConfig` defaults (the seeds'
numbers); what only alerting needs (how long a condition must hold, what counts as a spike) is defined here.
Pure: data only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from infercast.config import (
    SLO_BURN_FAST,
    SLO_BURN_SLOW,
    SLO_BURN_TICKET,
    FleetConfig,
    MetricsConfig,
    PredictorConfig,
    SloConfig,
    Thresholds,
)

#: The runbooks: one page per alert, shipped inside the package (alertrules/runbooks/*.md, package data) and in
#: the images (deploy/Dockerfile.* copy alertrules/).
RUNBOOKS = Path(__file__).resolve().parent / "runbooks"
#: The default base of the `runbook_url` annotations: the runbooks' path inside the infercast package (the same in
#: a checkout, a wheel and the image), so a page names a document that exists wherever infercast is installed.
#: Where you publish them for the people who get paged (a wiki, your fork's web view), set that URL instead:
#: `python -m infercast.alertrules.generate --runbook-base-url URL --out DIR`, or `INFERCAST_RUNBOOK_BASE_URL` for every
#: generator (`infercast k8s build` included).
RUNBOOK_BASE_URL = "alertrules/runbooks"
RUNBOOK_ENV = "INFERCAST_RUNBOOK_BASE_URL"


def runbook_base_url() -> str:
    """`INFERCAST_RUNBOOK_BASE_URL` when set (trailing slashes dropped), else `RUNBOOK_BASE_URL`."""
    return os.environ.get(RUNBOOK_ENV, "").strip().rstrip("/") or RUNBOOK_BASE_URL


@dataclass(frozen=True)
class AlertSettings:
    """Thresholds and `for:` durations (seconds) of every alert."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    #: the forecast horizon the predictive alert reads (the `horizon` label)
    forecast_horizon_seconds: int = int(PredictorConfig().horizon_seconds)
    #: forecasts older than this are stale (the predictor's own staleness limit)
    forecast_stale_seconds: float = PredictorConfig().stale_after_seconds
    runbook_base_url: str = field(default_factory=runbook_base_url)
    #: the fleet file's `metrics.source`: the serving figures from the exporter's series or the engine rules
    #: (alertrules/sources.py), and `metrics.rate_window`, the engine rules' rate window
    metrics_source: str = MetricsConfig().source
    rate_window: str = MetricsConfig().rate_window
    #: the fleet file's `slo:` (objectives per pool: the burn-rate rules inline them, as every threshold)
    slo: SloConfig = field(default_factory=SloConfig)
    #: some pool's engines are vLLM (`pools.<pool>.engines.kind`): in engines mode only vLLM gives the SLIs' counters,
    #: so only then is their absence a blind page (InfercastPageInputAbsent)
    vllm_engines: bool = True

    # --- SLO burn rates (config.SLO_BURN_*) and their windows (seconds) ----------------------------------------
    burn_fast: float = SLO_BURN_FAST
    burn_slow: float = SLO_BURN_SLOW
    burn_ticket: float = SLO_BURN_TICKET
    #: (long, short) windows of the fast page and of the slow page and ticket; the recorded series keep the names
    #: of these real-time windows (`ratio_rate1h`) when `scaled` shortens them for an accelerated twin
    window_fast: tuple[int, int] = (3600, 300)
    window_slow: tuple[int, int] = (21600, 1800)
    #: NVIDIA's XIDs that mean hardware needs a person (DCGM's and NVIDIA's XID catalogue: double-bit ECC, row
    #: remapping, NVLink, fallen off the bus, GSP, contained / uncontained ECC): these page; any other XID (an
    #: application's MMU fault 31, a graphics exception 13, a preemptive cleanup 45) is a warning
    hardware_xids: tuple[int, ...] = (48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140)

    # --- alert-only thresholds ------------------------------------------------------------------------------
    #: KV block allocation failures per second (5-minute rate) that count as "climbing"
    block_failure_rate: float = 0.5
    #: router degradations per second (5-minute rate, from one version) that count as a storm
    degradation_storm_rate: float = 1.0
    #: batch saturation at or above this, averaged over a pool's instances, counts as pinned at 1
    batch_pinned_ratio: float = 0.99
    #: ECC errors (any type) per GPU within 10 minutes that count as a spike; one uncorrectable always does
    ecc_spike_errors: int = 10
    #: actuator actions (applied or rolled back) per pool within 15 minutes that count as flapping
    flapping_actions: int = 6
    #: with a forecast breach firing, no actuator decision for this long means it is frozen
    frozen_quiet_seconds: int = 600

    # --- for: durations (seconds) -------------------------------------------------------------------------
    #: the fleet file's `thresholds.kv_forecast_for_seconds` (chosen on unscored twin runs, docs/predictors.md)
    for_forecast_breach: int = int(Thresholds().kv_forecast_for_seconds)
    #: InfercastKVCacheUsageHigh: the window whose median must be above the breaker (no `for:`, see rules.py)
    for_kv_usage: int = 60
    for_fragmentation_warning: int = 120
    for_fragmentation_critical: int = 60
    for_block_failures: int = 300
    for_degradation_storm: int = 120
    for_failover_headroom: int = 60
    for_batch_pinned: int = 600
    for_gpu_temperature: int = 60
    for_target_down: int = 120
    for_exporter_down: int = 120
    for_forecast_stale: int = 120
    #: InfercastForecastMissing: a pool observed with no forecast (nor skip reason) from any predictor replica
    for_forecast_missing: int = 120
    for_actuator_flapping: int = 0
    for_actuator_frozen: int = 300
    #: InfercastActuatorAuditFailed / InfercastActuatorFenced: the actuator leads but cannot act (pages)
    for_actuator_audit_failed: int = 60
    for_actuator_fenced: int = 60
    #: InfercastActuatorAuditUnknown: decisions of unknown outcome the ticks have not settled in this long
    for_actuator_audit_unknown: int = 900
    #: InfercastTargetMetricMissing: an expected family absent from a source's page (a ticket, not a page)
    for_target_metric_missing: int = 600
    for_mitigated: int = 0
    #: InfercastKVCacheForecastBreachMitigated: the window over which the fullest instance's KV usage must be falling
    for_symptom_falling: int = 120
    #: InfercastEnginesDown: half or more of a pool's engines unreachable this long
    for_engines_down: int = 120
    #: InfercastPageInputAbsent: a series the pages read absent this long
    for_page_input_absent: int = 300
    for_slo_fast: int = 120
    for_slo_slow: int = 900
    for_slo_ticket: int = 3600

    @classmethod
    def from_fleet(cls, cfg: FleetConfig) -> AlertSettings:
        """The settings of a fleet file: its thresholds (every threshold the rules compare with, and the
        predictive alert's `for:`), and its predictor's horizon and staleness limit."""
        return cls(
            thresholds=cfg.thresholds,
            forecast_horizon_seconds=int(cfg.predictor.horizon_seconds),
            forecast_stale_seconds=cfg.predictor.stale_after_seconds,
            for_forecast_breach=int(cfg.thresholds.kv_forecast_for_seconds),
            metrics_source=cfg.metrics.source,
            rate_window=cfg.metrics.rate_window,
            slo=cfg.slo,
            vllm_engines=any(p.engines.kind == "vllm" for p in cfg.pools.values()),
            runbook_base_url=cfg.alerting.runbook_base_url or runbook_base_url(),
        )

    def scaled(self, time_scale: float) -> AlertSettings:
        """The same settings with every `for:` duration divided by `time_scale` (for accelerated twins)."""
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        # a non-zero duration stays at least 1 s: `for: 0` would change what the alert means
        changes = {
            name: max(1, round(getattr(self, name) / time_scale)) if getattr(self, name) else 0
            for name in self.__dataclass_fields__
            if name.startswith("for_")
        }
        windows = {
            name: tuple(max(1, round(w / time_scale)) for w in getattr(self, name))
            for name in ("window_fast", "window_slow")
        }
        return replace(self, **changes, **windows)
