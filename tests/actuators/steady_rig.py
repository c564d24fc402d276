"""A rig for the steadiness tests (issue 36): the real control loop (`ControlLoop`: policy, guardrails,
verification and rollback, the alert book) on the real file backend (`FileAdmin`, a hot-reloaded router document in
a temporary directory), fed scripted inputs: alerts (fire, resolve, re-fire, or left to expire), forecasts and live
figures.  `ScriptedInputs` is the only test double (the metric store); everything the loop decides goes through the
same code as in the daemon.  Nothing here reads a clock: each tick is given its time."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infercast.actuators.actions import Action
from infercast.actuators.audit import Audit
from infercast.actuators.backends.file import FileAdmin
from infercast.actuators.controller import ControlLoop, LoopReport
from infercast.actuators.inputs import LoopInputs
from infercast.actuators.policy import Outlook
from infercast.actuators.webhook import AlertEvent
from infercast.config import FleetConfig, parse_config

REPO = Path(__file__).resolve().parents[2]
POOLS = ("v4-main", "v3.5-fallback")


def fleet_config(**sections: dict[str, Any]) -> FleetConfig:
    """The shipped flash-sale fleet file, with `sections` merged over its top-level sections (one level deep)."""
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    for k, v in sections.items():
        doc[k] = {**(doc.get(k) or {}), **v}
    return parse_config(doc)


class ScriptedInputs:
    """TEST DOUBLE of the metric store: the outlook per pool the test sets, fresh and finite."""

    def __init__(self, pools: Iterable[str] = POOLS) -> None:
        self.outlook: dict[str, Outlook] = {p: Outlook(p, 0.3, 0.3) for p in pools}

    def read(self, now: float, fleet) -> LoopInputs:
        return LoopInputs(now, dict(self.outlook), {}, {"live": 0.0, "forecast": 0.0})


def alert(status: str, pool: str = "v4-main", fingerprint: str = "a1") -> AlertEvent:
    """An Alertmanager notification about `pool` (InfercastKVCacheUsageHigh), as the webhook parses it."""
    return AlertEvent(fingerprint, status, "InfercastKVCacheUsageHigh", {"pool": pool})  # type: ignore[arg-type]


@dataclass
class Rig:
    cfg: FleetConfig
    loop: ControlLoop
    admin: FileAdmin
    inputs: ScriptedInputs
    applied: list[tuple[float, Action, str]] = field(default_factory=list)  # (when, action, intent or "rollback")
    reports: list[LoopReport] = field(default_factory=list)

    def tick(self, now: float, alerts: Iterable[AlertEvent] = ()) -> LoopReport:
        r = self.loop.tick(now, alerts=alerts)
        for d, outcome, _ in r.outcomes:
            if outcome in ("applied", "rolled_back"):
                self.applied.append((now, d.action, "rollback" if outcome == "rolled_back" else d.intent))
        self.reports.append(r)
        return r

    def admission(self) -> dict[str, Any]:
        a = self.admin.observe().admission
        return {k: getattr(a, k) for k in ("memory_limit", "max_context_tokens", "normal_queue_seconds",
                                           "low_queue_seconds")}  # fmt: skip

    def rolled_back(self) -> list[tuple[float, Action]]:
        return [(t, a) for t, a, why in self.applied if why == "rollback"]


def rig(tmp: Path, cfg: FleetConfig | None = None, admission: dict[str, Any] | None = None, audit: bool = False) -> Rig:
    """A loop on a fresh router document in `tmp` whose admission starts as `admission` (None: the document says
    nothing, the router's own defaults)."""
    cfg = cfg or fleet_config()
    path = tmp / "router.yaml"
    if admission is not None:
        path.write_text(yaml.safe_dump({"admission": admission}))
    admin = FileAdmin(path, cfg)
    inputs = ScriptedInputs()
    loop = ControlLoop(cfg, admin, inputs, audit=Audit(tmp / "audit.db") if audit else None)
    return Rig(cfg, loop, admin, inputs)


def calm_outlook(pool: str, kv: float = 0.3) -> Outlook:
    return Outlook(pool, kv, kv)


def breach_outlook(pool: str, eta: float, peak: float = 0.95, kv: float = 0.6) -> Outlook:
    return Outlook(pool, kv, peak, eta)


INF = math.inf
