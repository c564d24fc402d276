"""The actuator daemon: the control loop on the wall clock, under APScheduler, with a leader check before each tick.

What runs (docs/actuator.md):
- the control loop on a schedule, every `interval` (15 s: a scrape's worth of live metrics and the newest
  forecasts), calling the injected `tick(now, ctx) -> TickReport` (actuators/tick.py), and the same tick as
  soon as the webhook accepts a new alert event, so an alert is acted on within about a second instead of at the
  next scheduled run (`ctx.loop` says which: `scheduled` or `alert`);
- both on one single-threaded executor, so ticks never overlap (the control loop need not be re-entrant);
  APScheduler's `job_defaults` are explicit: `coalesce` (a backlog is one run), `max_instances=1` (an overrunning
  loop skips its next run rather than queueing it) and a `misfire_grace_time`; a run skipped either way is counted
  as `missed`, a run that raised as `error` (`infercast_actuator_ticks_total`), and the daemon carries on;
- before each tick the elector is asked (`try_acquire_or_renew`): the tick is `active` only when the mode is
  `active` and this replica leads; a follower, or a replica that cannot reach its lease store, stays advisory.
  Between ticks a renew job on its own thread keeps the lease (every third of `lease_seconds`);
- `/metrics` (the catalog's `infercast_actuator_*`) and the webhook are served on one listener through
  `infercast.httpserve` (loopback by default).  The webhook needs a bearer token whenever the daemon may act
  (mode `active`) or listens beyond loopback: without one the daemon refuses to be made (ValueError; the command
  line's rc 2).  Only an advisory daemon on loopback takes alerts without a token, and says so at start;
- before each tick the audit trail is checked (`Audit.check`): while its database is deleted, replaced or corrupt
  the tick runs advisory (`infercast_actuator_audit_failed 1`, a log line every tick) -- an action that cannot be
  recorded is not taken -- and rows left `unknown` by a lost answer are read back and settled (`reconcile`);
- when this replica starts acting as the leader (a new fencing token), before its first tick, it loads the guardrail
  state kept beside the lease (`infercast.actuators.failover.FailoverState.take_over`): what the previous leader applied
  counts in the cooldowns and change budget, what it left in flight goes through restart recovery.  While that
  state cannot be read (corrupt, foreign-shaped, unreachable) the tick runs advisory and each tick logs why at
  ERROR; the load is tried again at the next tick;
- `stop()` (SIGTERM, SIGINT) shuts the scheduler down with `wait=True`: the tick in flight finishes -- its apply,
  its audit record -- and no new one starts; then the leadership is released so a standby takes over at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from infercast.actuators.leader import LeaderElector, Leadership
from infercast.actuators.metrics import ActuatorMetrics
from infercast.actuators.tick import Loop, Mode, TickContext, TickHook, TickReport
from infercast.actuators.webhook import Offer, WebhookReceiver

if TYPE_CHECKING:
    from infercast.actuators.audit import Audit
    from infercast.actuators.failover import FailoverState
from infercast.catalog import ACTUATOR_AUDIT_FAILED, ACTUATOR_FENCED, ACTUATOR_FROZEN
from infercast.clock import Clock, WallClock
from infercast.httpserve import TOKEN_ENV, TOKEN_FILE_ENV, HttpService, Response, Route, is_loopback

log = logging.getLogger(__name__)

JOBS: tuple[Loop, ...] = ("scheduled", "alert")  # the scheduler's job ids are the `loop` label's values
#: runs in a row that raise or are skipped late before the daemon says it is not acting (one is a blip; three at
#: the 15 s interval are 45 s of a loop that does nothing)
RUNS_FAILING = 3
#: where the webhook's token may come from (named in the refusal)
TOKEN_SOURCES = f"actuator.webhook.token_env (default $INFERCAST_ACTUATOR_TOKEN), actuator.webhook.token_file, " \
    f"${TOKEN_ENV} or ${TOKEN_FILE_ENV}"  # fmt: skip


def check_webhook_auth(mode: Mode, host: str, token: str | None) -> None:
    """ValueError when a webhook would run without a token where it must not: an acting daemon (one forged alert
    would make it act) or a listener reachable beyond this machine."""
    if token:
        return
    if mode == "active":
        raise ValueError(
            "actuator: mode active needs a token on the alert webhook (without one, anyone who can reach the "
            f"listener can make the actuator act): set {TOKEN_SOURCES}"
        )
    if not is_loopback(host):
        raise ValueError(
            f"actuator: the alert webhook listens on {host}, beyond loopback, and has no token: set {TOKEN_SOURCES} "
            "(or listen on 127.0.0.1)"
        )


class Daemon:
    def __init__(
        self,
        tick: TickHook,
        elector: LeaderElector,
        *,
        mode: Mode = "advisory",
        clock: Clock | None = None,
        metrics: ActuatorMetrics | None = None,
        interval: float = 15.0,
        misfire_grace: float = 5.0,
        renew_interval: float | None = None,
        webhook: WebhookReceiver | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        fence_reader: Callable[[], int | None] | None = None,
        audit: Audit | None = None,
        reconcile: Callable[[float], Any] | None = None,
        state: FailoverState | None = None,
    ) -> None:
        self.tick = tick
        self.state = state  # infercast.actuators.failover.FailoverState (None: nothing kept beside the lease)
        self._state_for: tuple[str | None, int | None] | None = None  # the leadership the state was loaded under
        self._state_broken = False
        self.audit = audit  # infercast.actuators.audit.Audit: checked before each tick (None: not checked)
        self.reconcile = (
            reconcile  # settles rows a lost answer left unknown (infercast.actuators.recovery.reconcile_unknown)
        )
        self._audit_broken = False
        self._failing_runs = 0  # runs in a row that raised or were skipped late (RUNS_FAILING: not acting)
        self._leading = False  # whether the last run's elector said this replica leads
        self.fence_reader = fence_reader  # the highest fencing token the backend has seen (None: it keeps none)
        self._fenced = False
        self.elector = elector
        self.mode: Mode = mode
        self.clock = clock or WallClock()
        self.metrics = metrics or ActuatorMetrics()
        self.interval = interval
        self.misfire_grace = misfire_grace
        self.renew_interval = renew_interval
        self.last_report: TickReport | None = None
        self.metrics.leadership(False, False)
        self.open_webhook = webhook is not None and not token
        if webhook is not None:
            check_webhook_auth(mode, host, token)
        routes = [Route("GET", "/metrics", self._metrics)]
        if webhook is not None:
            routes.append(webhook.route())
            previous = webhook.on_offer

            def on_offer(offer: Offer) -> None:
                self.metrics.webhook(offer)
                if previous is not None:
                    previous(offer)
                if offer.accepted:
                    self.wake()

            webhook.on_offer = on_offer
        self.http = HttpService(routes, host, port, name="actuator", token=token)
        self.scheduler = BackgroundScheduler(
            executors={"loop": ThreadPoolExecutor(1), "leader": ThreadPoolExecutor(1)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": max(1, int(misfire_grace))},
            timezone=UTC,
        )
        self.scheduler.add_listener(self._missed, EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES | EVENT_JOB_ERROR)
        self._stopped = threading.Event()
        self._lead_lock = threading.Lock()  # the renew job and a tick's check never ask the elector at once

    @property
    def url(self) -> str:
        return self.http.url

    # --- one run of a loop ---------------------------------------------------------------------------------
    def run_once(self, loop: Loop) -> TickReport | None:
        """Ask the elector, run the tick, publish its report; what the scheduler calls (tests call it directly).
        Never raises: a tick that raises is logged and counted as `error`."""
        now = self.clock.now()
        with self._lead_lock:
            lead = self.elector.try_acquire_or_renew(now)
            lead, fenced = self._check_fence(lead, now)
            self._fenced = fenced
        broken = self._check_audit(now)
        acting = self.mode == "active" and lead.is_leader and not fenced and not broken
        stateless = self._check_state(lead, now, acting)
        active = acting and not stateless and self._failing_runs < RUNS_FAILING
        self._leading = lead.is_leader
        self.metrics.leadership(lead.is_leader, active)
        self.metrics.fenced(fenced)
        if self.mode == "active" and not lead.is_leader:
            log.info("actuator: %s tick advisory: not the leader (%s)", loop, lead.detail)
        ctx = TickContext(loop=loop, active=active, mode=self.mode, leadership=lead)
        try:
            report = self.tick(now, ctx)
        except Exception:
            log.exception("actuator: %s tick failed", loop)
            self.metrics.tick(loop, "error")
            self._run_failed(loop, "raised")
            return None
        finally:
            if self.audit is not None:  # rows the tick could not write count at once, and a write that failed
                # broke the trail: paged now (`audit_failed` 1, not active), not at the next tick's check
                if getattr(self.audit, "broken", None) is not None and not self._audit_broken:
                    self._audit_broken = True
                    self.metrics.leadership(lead.is_leader, False)
                    log.error(
                        "actuator: not acting (advisory) from the next tick: the audit trail is unusable: %s; "
                        "restore it and restart the daemon (%s 1)", self.audit.broken, ACTUATOR_AUDIT_FAILED,
                    )  # fmt: skip
                self.metrics.audit(self._audit_broken, None, int(getattr(self.audit, "unrecorded", 0)))
        if self._failing_runs >= RUNS_FAILING:
            log.warning("actuator: %s tick ran again after %d failed runs", loop, self._failing_runs)
        self._failing_runs = 0
        self.metrics.record(report, loop)
        self.metrics.tick(loop, "ok")
        self.last_report = report
        return report

    def _run_failed(self, loop: str, how: str) -> None:
        """A run that raised or was skipped.  After RUNS_FAILING in a row (none ran through since) the daemon is not
        acting and says so as loudly as a broken audit trail: `active` 0, `frozen` 1 (reason `other`: the
        InfercastActuatorFrozen page) and an ERROR line per failed run, until a run goes through (issue 36: with
        `misfire_grace_seconds: 1e300` every scheduled run failed inside APScheduler while `/metrics` said active)."""
        self._failing_runs += 1
        if self._failing_runs < RUNS_FAILING:
            return
        why = f"the last {self._failing_runs} runs of the control loop failed (the latest, {loop}, {how})"
        log.error("actuator: not acting: %s; see the errors above (%s 1)", why, ACTUATOR_FROZEN)
        self.metrics.leadership(self._leading, False)
        self.metrics.record(TickReport(frozen=True, freeze_reason="other", note=why), loop)

    def _check_audit(self, now: float) -> bool:
        """Whether the audit trail is broken (the tick then runs advisory); settles `unknown` rows when it is not."""
        if self.audit is None:
            return False
        try:
            problem = self.audit.check()
        except Exception as e:  # a check that fails is a broken trail, not a crashed tick
            problem = f"the audit trail cannot be checked: {str(e)[:200]}"
        unknown = None
        if problem is None:
            if self.reconcile is not None:
                try:
                    self.reconcile(now)
                except Exception:
                    log.exception("actuator: reconciling decisions of unknown outcome failed")
            try:
                unknown = self.audit.count_unknown()
            except Exception as e:
                problem = f"the audit trail cannot be read: {str(e)[:200]}"
        self._audit_broken = problem is not None
        if problem is not None and self.mode == "active":
            log.error(
                "actuator: not acting (advisory): the audit trail is unusable: %s; restore it and restart the daemon "
                "(%s 1)", problem, ACTUATOR_AUDIT_FAILED,
            )  # fmt: skip
        self.metrics.audit(problem is not None, unknown, int(getattr(self.audit, "unrecorded", 0)))
        return problem is not None

    def _check_state(self, lead: Leadership, now: float, acting: bool) -> bool:
        """Whether the guardrail state beside the lease is unusable (the tick then runs advisory).  Loaded once per
        leadership (holder and fencing token), before the first tick that acts under it."""
        if self.state is None:
            return False
        if not acting:
            self._state_for = None
            self.state.follow()
            return False
        under = (lead.holder, lead.fencing_token)
        if self._state_for == under:
            self.state.lead = lead
            self.state.flush(now)
            return False
        from infercast.actuators.state_store import StateError

        try:
            summary = self.state.take_over(lead, now)
        except StateError as e:
            self._state_broken = True
            self.state.follow()
            log.error(
                "actuator: not acting (advisory): the guardrail state beside the lease cannot be used, so the "
                "previous leader's cooldowns, change budget and actions in flight are unknown: %s", e,
            )  # fmt: skip
            return True
        except Exception:
            self._state_broken = True
            self.state.follow()
            log.exception("actuator: not acting (advisory): loading the guardrail state beside the lease failed")
            return True
        self._state_for, self._state_broken = under, False
        log.warning("actuator: %s", summary)
        return False

    def _check_fence(self, lead: Leadership, now: float) -> tuple[Leadership, bool]:
        """(the leadership to act under, fenced).  A leader whose token is behind the one its backend holds (the
        lease store lost or restored state) re-acquires above it; when it cannot, it is fenced: it says so every
        tick (a log line and `infercast_actuator_fenced 1`) and does not act, rather than fail every action."""
        if self.mode != "active" or not lead.is_leader or lead.fencing_token is None or self.fence_reader is None:
            return lead, False
        try:
            seen = self.fence_reader()
        except Exception as e:  # the backend still checks each apply; this is only the early warning
            log.warning("actuator: could not read the backend's fencing token: %s", str(e)[:200])
            return lead, False
        if seen is None or seen <= lead.fencing_token:
            return lead, False
        advance = getattr(self.elector, "advance_past", None)
        moved = advance(seen, now) if advance is not None else None
        if moved is not None and moved.is_leader and (moved.fencing_token or 0) > seen:
            log.warning(
                "actuator: the backend holds fencing token %d, ahead of this leader's %d (the lease store lost or "
                "restored state): %s", seen, lead.fencing_token, moved.detail,
            )  # fmt: skip
            return moved, False
        log.error(
            "actuator: fenced: the backend holds fencing token %d, ahead of this leader's %d, and the lease could "
            "not be re-acquired above it: leading but not acting (%s 1)",
            seen, lead.fencing_token, ACTUATOR_FENCED,
        )  # fmt: skip
        return lead, True

    def renew(self) -> None:
        with self._lead_lock:
            lead = self.elector.try_acquire_or_renew(self.clock.now())
        acting = self.mode == "active" and lead.is_leader and not self._fenced and not self._audit_broken
        self.metrics.leadership(lead.is_leader, acting and not self._state_broken)

    def wake(self) -> None:
        """Run the alert loop now (a new alert event arrived); at most one such run waits behind a running tick."""
        if self._stopped.is_set() or not self.scheduler.running:
            return
        self.scheduler.add_job(
            self.run_once,
            "date",
            args=["alert"],
            id="alert",
            name="alert",
            executor="loop",
            replace_existing=True,
            run_date=datetime.now(UTC),
            max_instances=2,  # one running, one waiting: an event that arrives mid-run still gets its run
        )

    # --- lifecycle -------------------------------------------------------------------------------------------
    def start(self, *, first_run: bool = True) -> Daemon:
        """Serve /metrics (and the webhook), start the schedule (its first run at once when `first_run`)."""
        self.http.start()
        start = datetime.now(UTC)
        first = start if first_run else start + timedelta(seconds=self.interval)
        self.scheduler.add_job(
            self.run_once, "interval", args=["scheduled"], id="scheduled", name="scheduled", executor="loop",
            seconds=self.interval, next_run_time=first,
        )  # fmt: skip
        if self.renew_interval:
            self.scheduler.add_job(
                self.renew, "interval", id="leader", name="leader", executor="leader", seconds=self.renew_interval
            )
        self.scheduler.start()
        if self.open_webhook:
            log.warning(
                "actuator: the alert webhook on %s takes alerts with no token (advisory mode on loopback only; "
                "acting needs one: %s)", self.http.url, TOKEN_SOURCES,
            )  # fmt: skip
        log.info(
            "actuator: %s mode, the control loop every %g s and on each new alert; /metrics on %s",
            self.mode, self.interval, self.http.url,
        )  # fmt: skip
        return self

    def stop(self, wait: bool = True) -> None:
        """Finish the tick in flight (wait=True), start no other, hand the leadership over, stop serving."""
        self._stopped.set()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=wait)
        try:
            self.elector.release()
        except Exception:  # releasing is a courtesy: the lease expires anyway
            log.warning("actuator: could not release the leadership", exc_info=True)
        self.metrics.leadership(False, False)
        self.http.close()

    # --- helpers ---------------------------------------------------------------------------------------------
    def _missed(self, event: JobExecutionEvent) -> None:
        loop = event.job_id
        if loop in JOBS:
            log.warning("actuator: %s tick skipped (late or still running)", loop)
            self.metrics.tick(loop, "missed")
            if event.code == EVENT_JOB_MISSED:  # an overrun (max instances) is a run still going, not a failure
                self._run_failed(loop, "skipped: late")
        elif event.code == EVENT_JOB_ERROR and loop in JOBS:
            self._run_failed(loop, "raised in the scheduler")

    def _metrics(self, _) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(200, self.metrics.exposition(), CONTENT_TYPE_LATEST)
