"""`infercast actuator --config FILE [--mode advisory|active] [--tick MODULE:FACTORY] [--once]`: run the daemon.

It reads the fleet file's `actuator:` section, builds the backend, the elector, the audit trail, the webhook inbox
and (when a Prometheus URL is configured) the metric store, keeps the guardrail state beside the lease when it acts
(`keep_state_beside_the_lease`, actuators/failover.py), resolves what a previous run left in flight (without
applying it again), builds the control loop with the tick factory, and runs it on APScheduler until SIGTERM or
SIGINT.  A bad section is a `ConfigError` naming the key, before anything starts.

`--tick MODULE:FACTORY` names the control loop: a callable `FACTORY(parts: DaemonParts) -> TickHook`.  The default
is infercast's own (`infercast.actuators.controller:build_tick`); tests and other control loops pass theirs.  `--once`
runs the control loop once, prints its report as JSON and exits (for checks and cron jobs).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from infercast.actuators.audit import Audit, AuditError
from infercast.actuators.parts import DaemonParts
from infercast.actuators.tick import Mode, TickHook
from infercast.actuators.webhook import Inbox
from infercast.clock import Clock, WallClock
from infercast.config import ConfigError, FleetConfig, load_config, parse_listen

if TYPE_CHECKING:
    from infercast.actuators.failover import FailoverState
    from infercast.actuators.leader import LeaderElector

log = logging.getLogger(__name__)


def default_tick_factory():
    """infercast's own control loop, the factory when `--tick` names none (imported here, not at start-up: the
    controller pulls in the policy and the forecasts' readers, which `infercast actuator --help` does not need)."""
    from infercast.actuators.controller import build_tick

    return build_tick


def load_tick_factory(spec: str):
    """`MODULE:FACTORY` -> the factory; ConfigError saying what is missing."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError(f"--tick: expected MODULE:FACTORY, got {spec!r}")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (module == e.name or module.startswith(e.name + ".")):
            raise ConfigError(
                f"--tick: no module {module!r}: the control loop it names is not installed (--tick MODULE:FACTORY "
                "names another)"
            ) from None
        raise
    factory = getattr(mod, name, None)
    if not callable(factory):
        raise ConfigError(f"--tick: {module} has no callable {name!r}")
    return factory


def _listen(text: str) -> tuple[str, int]:
    try:
        return parse_listen(text)
    except ValueError as e:
        raise ConfigError(f"actuator.listen: {e}") from None


def build_parts(cfg: FleetConfig, mode: Mode, clock: Clock | None = None) -> DaemonParts:
    from infercast.actuators.backends import build_backend

    ac = cfg.actuator
    admin = build_backend(cfg)
    try:
        audit = Audit(ac.audit_db)
    except AuditError as e:
        raise ConfigError(f"actuator.audit_db: {e}") from None
    url = ac.prometheus_url or cfg.predictor.prometheus_url
    store = None
    if url:
        from infercast.store.prometheus import PrometheusStore

        store = PrometheusStore(url, timeout_seconds=max(1.0, min(10.0, ac.interval_seconds / 3)))
    return DaemonParts(
        config=cfg,
        mode=mode,
        admin=admin,
        audit=audit,
        inbox=Inbox(ac.webhook.inbox_size, ac.webhook.dedup_seconds),
        store=store,
        clock=clock or WallClock(),
        apply_attempts=ac.apply_attempts,
        apply_backoff_seconds=ac.apply_backoff_seconds,
    )


def webhook_token(cfg: FleetConfig) -> str | None:
    """The webhook's bearer token from its one source (`infercast.httpserve.resolve_token`); ConfigError when two
    sources disagree or the token file cannot be used."""
    from infercast.httpserve import resolve_token

    wh = cfg.actuator.webhook
    try:
        return resolve_token(file=wh.token_file, env=wh.token_env)
    except ValueError as e:
        raise ConfigError(f"actuator.webhook: {e}") from None


def keep_state_beside_the_lease(parts: DaemonParts, elector: LeaderElector) -> FailoverState | None:
    """The guardrail state kept beside `elector`'s lease (`infercast.actuators.failover.FailoverState`), with
    `parts.audit` replaced by the trail that writes it; None (parts unchanged) where the lease has nowhere to keep
    it."""
    from infercast.actuators.failover import FailoverState
    from infercast.actuators.state_store import store_for

    store = store_for(elector, parts.config.actuator.audit_db)
    if store is None:
        return None
    state = FailoverState(store, parts.audit, parts.admin, parts.config.guardrails.cooldown_seconds)
    parts.audit = state.audit  # type: ignore[assignment]
    return state


def build_daemon(
    parts: DaemonParts, tick: TickHook, listen: str | None = None, *, serve: bool = True,
    elector: LeaderElector | None = None, state: FailoverState | None = None,
):  # fmt: skip
    """The daemon; `serve=False` (--once) gives it no webhook, so it needs no token.  ConfigError when the webhook
    would be open where it must not be (infercast.actuators.daemon.check_webhook_auth).  `elector`: the one
    `keep_state_beside_the_lease` was given (default: built from the config); `state`: what it returned."""
    from infercast.actuators.daemon import Daemon
    from infercast.actuators.leader import build_elector
    from infercast.actuators.recovery import reconcile_unknown
    from infercast.actuators.webhook import WebhookReceiver

    cfg = parts.config
    ac = cfg.actuator
    host, port = _listen(listen or ac.listen)
    elector = elector or build_elector(ac.leader, ac.backend)
    lease = getattr(ac.leader, "lease_seconds", None) or getattr(getattr(elector, "lease", None), "lease_ms", 0) / 1000
    token = webhook_token(cfg) if serve else None
    hook = WebhookReceiver(parts.inbox, ac.webhook.path, ac.webhook.max_body_bytes) if serve else None
    try:
        return Daemon(
            tick,
            elector,
            mode=parts.mode,
            clock=parts.clock,
            interval=ac.interval_seconds,
            misfire_grace=ac.misfire_grace_seconds,
            renew_interval=lease / 3 if lease else None,
            webhook=hook,
            host=host,
            port=port,
            token=token,
            fence_reader=getattr(parts.admin, "fence", None),
            audit=parts.audit,
            reconcile=lambda now: reconcile_unknown(parts.audit, parts.admin, now),
            state=state,
        )
    except ValueError as e:
        raise ConfigError(str(e)) from None


def hold_audit(path: str) -> _Held:
    """An exclusive lock on the audit trail for as long as the returned file stays open: two acting daemons on one
    audit trail (`leader: single` started twice) is a ConfigError naming the other's pid, not two silent actors.

    One trail is one file however its path is written (issue 36 item 3: two daemons reaching it through a symlink
    both acted): the lock file is `<resolved path>.lock` (relative, absolute, a symlink or `..` all resolve to one
    name), and the audit file itself is `flock`ed too, which holds on its inode, so a bind mount or a hard link of
    the file (another name no resolving can tell) finds the same lock.  (`flock` and SQLite's POSIX locks do not
    interact on Linux; the descriptor stays open for the daemon's life, so SQLite's locks are never dropped by it.)"""
    import fcntl
    import os

    real = os.path.realpath(path)
    try:
        os.makedirs(os.path.dirname(real) or ".", exist_ok=True)  # as the audit trail makes its directory
        f = open(f"{real}.lock", "a+")  # noqa: SIM115 -- held open for the daemon's life
    except OSError as e:
        raise ConfigError(f"actuator: cannot lock the audit trail {path} (actuator.audit_db): {e}") from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        trail = _lock_trail(real)
    except BlockingIOError:
        f.seek(0)
        other = f.read().strip()[:20] or "?"
        f.close()
        raise ConfigError(
            f"actuator: another acting daemon (pid {other}) holds {path}: leader: single means one; stop it, or "
            "configure leader: redis or kubernetes to run replicas"
        ) from None
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    return _Held(f, trail)


class _Held:
    """The held locks: the lock file (its `name`, `close`) and the audit file's own descriptor."""

    def __init__(self, f: Any, trail: int | None) -> None:
        self._f, self._trail = f, trail
        self.name = f.name

    def close(self) -> None:
        import os

        if self._trail is not None:
            os.close(self._trail)
            self._trail = None
        self._f.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _lock_trail(real: str) -> int | None:
    """`flock` the audit file itself (created empty when missing: SQLite takes an empty file as a new database);
    BlockingIOError when another daemon holds it.  None when the file cannot be opened at all (its directory is
    read-only): the lock file alone then stands, and the audit trail reports the rest."""
    import fcntl
    import os

    fd = None
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):
        try:
            fd = os.open(real, flags, 0o600)
            break
        except OSError:
            continue
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise
    return fd


def run(args: argparse.Namespace) -> int:
    from infercast.actuators.leader import build_elector
    from infercast.actuators.recovery import resolve_in_flight

    if not args.config:
        raise ConfigError("infercast actuator: --config FILE is required")
    cfg = load_config(args.config)
    mode: Mode = args.mode or cfg.actuator.mode
    spec = getattr(args, "tick", None)
    factory = load_tick_factory(spec) if spec else default_tick_factory()
    hold = hold_audit(cfg.actuator.audit_db) if mode == "active" and cfg.actuator.leader.kind == "single" else None
    parts = build_parts(cfg, mode)
    parts.audit_lock = hold
    # the guardrail state beside the lease (cooldowns, change budget, actions in flight), so a failover neither
    # repeats nor forgets an action: the trail the loop writes through keeps it (actuators/failover.py)
    elector = build_elector(cfg.actuator.leader, cfg.actuator.backend)
    state = keep_state_beside_the_lease(parts, elector) if mode == "active" else None
    for r in resolve_in_flight(parts.audit, parts.admin, parts.clock.now()):
        print(f"infercast actuator: in-flight decision {r.decision.id}: {r.outcome}: {r.detail}", file=sys.stderr)
    tick = factory(parts)
    # --once serves nothing: a free loopback port, so it runs beside a daemon that holds actuator.listen
    listen = "127.0.0.1:0" if args.once else None
    daemon = build_daemon(parts, tick, listen, serve=not args.once, elector=elector, state=state)
    if args.once:
        report = daemon.run_once("scheduled")
        daemon.stop()
        parts.audit.close()
        if report is None:
            return 1
        print(json.dumps(_plain(report), indent=2, default=str))
        return 0
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    daemon.start()
    print(f"infercast actuator: {mode} mode, serving {daemon.url}/metrics", file=sys.stderr, flush=True)
    try:
        stop.wait()
    finally:
        log.info("actuator: stopping: finishing the tick in flight")
        daemon.stop(wait=True)
        parts.audit.close()
    print("infercast actuator: stopped", file=sys.stderr, flush=True)
    return 0


def _plain(report) -> dict[str, Any]:
    d = dataclasses.asdict(report)
    d["actions"] = [{**dataclasses.asdict(a), "action": a.action.to_dict()} for a in report.actions]
    d["verdicts"] = [{**dataclasses.asdict(v), "action": v.action.to_dict()} for v in report.verdicts]
    d["budget_used"] = dict(report.budget_used)
    return d
