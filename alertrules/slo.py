"""SLO recording rules and multi-window, multi-burn-rate alerts (pure: settings in, rules out).

Two SLIs per pool and version, each recorded as an error ratio (the share of requests that missed the objective)
over four windows, and as a burn rate (that ratio over the pool's error budget, 1 - objective):

- availability: requests that ended in error, timeout, rejected or shed over every request that ended, from the
  router's `infercast_router_requests_total` (`retried` counts a failed attempt the client tries again, not an
  ended request); with `metrics.source: engines`, the engines' own `vllm:request_success_total`, whose
  `finished_reason` abort or error is bad;
- latency: requests whose time to first token is over the pool's `ttft_seconds`, from the engines' histogram
  (`vllm:time_to_first_token_seconds`, scraped with the generated jobs' `pool` label).  The exporter does not
  re-emit it, so the latency SLI needs Prometheus to scrape the engines (docs/alerting.md).

The alerts follow the SRE workbook (chapter 5, "Alerting on SLOs"): a page when the budget burns 14.4 times too fast
over both 1 h and 5 m (2% of a 30-day budget in an hour; the short window makes it stop soon after the burn does), a
page at 6 times over 6 h and 30 m, and a ticket at 1 time over 6 h and 30 m.  Objectives and targets are the fleet
file's `slo:` (per pool), inlined like every threshold, so `infercast check` sees a stale rule file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from infercast.catalog import REC_SLO_BURN_RATE, REC_SLO_ERROR_RATIO, ROUTER_REQUESTS_TOTAL
from infercast.config import SloConfig
from infercast.durations import duration

from .settings import AlertSettings
from .shape import alert_rule as _alert  # one rule shape for every alert

SLIS = ("availability", "latency")
#: the router's outcomes that fail the availability SLI (catalog.ROUTER_OUTCOMES; `retried` is not an ended request)
BAD_OUTCOMES = "error|timeout|rejected|shed"
#: vLLM's finished reasons that fail it in engines mode
BAD_FINISHED = "abort|error"
VLLM_SUCCESS = "vllm:request_success_total"
VLLM_TTFT = "vllm:time_to_first_token_seconds"
#: only the engines scraped under the generated jobs carry the fleet file's pool (alertrules/engines.py)
SCRAPED = 'pool!=""'
#: what the SLIs are kept per: the pool and version, and the namespace the series were scraped in where they carry
#: one (Kubernetes), so the dashboards' $namespace selects them; without the label (compose, a single Prometheus)
#: the series are the pool's alone
BY = "namespace, pool, version"
#: window role -> the name its recorded series carries (the real-time window, also in a time-scaled set)
WINDOW_NAMES = {"fast_long": "1h", "fast_short": "5m", "slow_long": "6h", "slow_short": "30m"}


def windows(s: AlertSettings) -> dict[str, int]:
    """Window role -> its length in seconds (scaled with the settings)."""
    return {
        "fast_long": s.window_fast[0],
        "fast_short": s.window_fast[1],
        "slow_long": s.window_slow[0],
        "slow_short": s.window_slow[1],
    }


def error_ratio(role: str) -> str:
    return f"{REC_SLO_ERROR_RATIO}{WINDOW_NAMES[role]}"


def burn_rate(role: str) -> str:
    return f"{REC_SLO_BURN_RATE}{WINDOW_NAMES[role]}"


def pool_groups(slo: SloConfig, value: Callable[[tuple[float, float, float]], float]) -> list[tuple[str, float]]:
    """(pool matcher, value) pairs covering every pool once: the pools whose own value differs from the fleet's, one
    each, and the fleet's value for every other pool (also pools the rules were not built with)."""
    fleet = value((slo.availability, slo.latency, slo.ttft_seconds))
    own = [(pool, value(slo.of(pool))) for pool in sorted(slo.pools)]
    own = [(pool, v) for pool, v in own if v != fleet]
    others = "|".join(re.escape(p).replace("\\", "\\\\") for p, _ in own)
    groups = [(f'pool!~"{others}",{SCRAPED}' if others else SCRAPED, fleet)]
    groups += [(f'pool="{pool}"', v) for pool, v in own]
    return groups


def le_matcher(seconds: float) -> str:
    """A regex matching the `le` label of bucket `seconds` however the engine writes it ("1", "1.0", "2.5")."""
    text = f"{seconds:g}"
    regex = re.escape(text) + ("0*" if "." in text else r"(\.0*)?")
    return 'le=~"' + regex.replace("\\", "\\\\") + '"'


def _availability(s: AlertSettings, w: str) -> str:
    if s.metrics_source == "engines":
        counter, bad, ok = VLLM_SUCCESS, f'finished_reason=~"{BAD_FINISHED}"', SCRAPED
        bad = f"{SCRAPED},{bad}"
    else:
        counter, bad, ok = ROUTER_REQUESTS_TOTAL, f'outcome=~"{BAD_OUTCOMES}"', 'outcome!="retried"'
    total = f"sum by ({BY}) (rate({counter}{{{ok}}}[{w}]))"
    # `or 0 * total`: a pool with no failed request yet has no bad series at all; its ratio is 0, not absent
    return f"(sum by ({BY}) (rate({counter}{{{bad}}}[{w}])) or 0 * {total}) / {total}"


def _latency(s: AlertSettings, w: str) -> str:
    within = " or ".join(
        f"rate({VLLM_TTFT}_bucket{{{pool},{le_matcher(ttft)}}}[{w}])" for pool, ttft in pool_groups(s.slo, _ttft)
    )
    total = f"sum by ({BY}) (rate({VLLM_TTFT}_count{{{SCRAPED}}}[{w}]))"
    return f"1 - sum by ({BY}) ({within}) / {total}"


def _ttft(objectives: tuple[float, float, float]) -> float:
    return objectives[2]


def _objective(sli: str) -> Callable[[tuple[float, float, float]], float]:
    return (lambda o: o[0]) if sli == "availability" else (lambda o: o[1])


def slo_recording_rules(s: AlertSettings) -> list[dict[str, Any]]:
    """The SLO group: error ratios per SLI and window, then burn rates (each over its pool's budget)."""
    rules: list[dict[str, Any]] = []
    for role, seconds in windows(s).items():
        w = duration(seconds)
        rules.append({"record": error_ratio(role), "expr": _availability(s, w), "labels": {"slo": "availability"}})
        rules.append({"record": error_ratio(role), "expr": _latency(s, w), "labels": {"slo": "latency"}})
    for role in windows(s):
        for sli in SLIS:
            parts = [
                f'{error_ratio(role)}{{slo="{sli}",{pool}}} / {round(1 - objective, 9):g}'
                for pool, objective in pool_groups(s.slo, _objective(sli))
            ]
            expr = " or ".join(f"({p})" for p in parts) if len(parts) > 1 else parts[0]
            rules.append({"record": burn_rate(role), "expr": expr, "labels": {"slo": sli}})
    return [{"name": "infercast.slo.recording", "rules": rules}]


#: how descriptions name a pool's version
PV = "{{ $labels.version }} in pool {{ $labels.pool }}"
WHAT = {
    "availability": "requests ending in error, timeout, rejected or shed",
    "latency": "requests whose first token came after the pool's target",
}


def slo_alerts(s: AlertSettings) -> list[dict[str, Any]]:
    """Per SLI: the fast page, the slow page and the ticket (multi-window, multi-burn-rate)."""
    out = []
    levels = (
        ("BurnRateFast", "fast", s.burn_fast, "critical", s.for_slo_fast),
        ("BurnRateSlow", "slow", s.burn_slow, "critical", s.for_slo_slow),
        ("BudgetTicket", "slow", s.burn_ticket, "ticket", s.for_slo_ticket),
    )
    for sli in SLIS:
        title = sli.capitalize()
        for suffix, speed, factor, severity, for_s in levels:
            long, short = f"{speed}_long", f"{speed}_short"
            sel = f'{{slo="{sli}"}}'
            expr = f"{burn_rate(long)}{sel} > {factor:g} and on ({BY}, slo) {burn_rate(short)}{sel} > {factor:g}"
            out.append(
                _alert(
                    name=f"Infercast{title}{suffix}",
                    expr=expr,
                    for_s=for_s,
                    severity=severity,
                    team="serving",
                    summary=f"A pool spends its {sli} error budget {factor:g}x as fast as it accrues, or faster.",
                    description=f'{PV} burns its {sli} error budget {{{{ $value | printf "%.1f" }}}} times as fast '
                    f"as it accrues over the last {WINDOW_NAMES[long]} (and over {WINDOW_NAMES[short]}; "
                    f"{'page' if severity == 'critical' else 'ticket'} at {factor:g}): {WHAT[sli]}.",
                    slo=sli,
                )
            )
    return out
