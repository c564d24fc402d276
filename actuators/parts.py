"""What a tick factory gets to build the control loop from (`DaemonParts`): the daemon (actuators/daemon_cli.py)
builds it, the control loop (`infercast.actuators.controller.build_tick`, or a loop named by `--tick`) reads it.  Its
own module so that the control loop, which the daemon imports, never imports the daemon back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from infercast.actuators.admin import FleetAdmin
from infercast.actuators.audit import Audit
from infercast.actuators.tick import Mode
from infercast.actuators.webhook import Inbox
from infercast.clock import Clock
from infercast.config import FleetConfig
from infercast.store import Store


class HeldLock(Protocol):
    """The audit trail's lock while the daemon holds it (`daemon_cli.hold_audit`): its file name, and its release."""

    name: str

    def close(self) -> None: ...


@dataclass
class DaemonParts:
    """What a tick factory gets to build the control loop from."""

    config: FleetConfig
    mode: Mode
    admin: FleetAdmin
    audit: Audit
    inbox: Inbox
    store: Store | None  # infercast.store.prometheus.PrometheusStore, or None when no Prometheus is configured
    clock: Clock
    apply_attempts: int = 3
    apply_backoff_seconds: float = 0.2
    audit_lock: HeldLock | None = None  # the open lock file of an acting `leader: single` daemon (hold_audit)
