"""Every number the alert rules use, in one place.

The policy thresholds come from `infercast.config.Thresholds` and `PredictorConfig` defaults (the seeds'
numbers); what only alerting needs (how long a condition must hold, what counts as a spike) is defined here.
Pure: data only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from infercast.config import PredictorConfig, Thresholds

#: Where the runbooks are read by people who get paged.  The files live in this repository under
#: alertrules/runbooks/; point this at your fork or an internal mirror.
RUNBOOK_BASE_URL = "https://github.com/infercast/infercast/blob/main/alertrules/runbooks"


@dataclass(frozen=True)
class AlertSettings:
    """Thresholds and `for:` durations (seconds) of every alert."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    #: the forecast horizon the predictive alert reads (the `horizon` label)
    forecast_horizon_seconds: int = int(PredictorConfig().horizon_seconds)
    #: forecasts older than this are stale (the predictor's own staleness limit)
    forecast_stale_seconds: float = PredictorConfig().stale_after_seconds
    runbook_base_url: str = RUNBOOK_BASE_URL

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
    for_mitigated: int = 0

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
        return replace(self, **changes)
