"""The actuator dashboard: what it decided and why, what it applied or proposed, what was refused, how it
was judged, and when it froze or was fenced."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row

from . import queries as q
from .panels import DashboardSettings, Section, base, compose, stat, steps, ts, variable

ON_OFF = steps((None, "green"), (1, "red"))
LEADERS = steps((None, "red"), (1, "green"), (2, "red"))  # none or two leaders: both wrong
BUDGET_BANDS = steps((None, "green"), (0.8, "orange"), (1, "red"))


def actuator(s: DashboardSettings) -> Dashboard:
    return compose(
        base(
            "infercast-actuator",
            "infercast / Actuator",
            "What the actuator decided and why, what it applied or only proposed, what was refused, how it was "
            "judged, and when it froze or was fenced.",
            variable("pool", "Pool", q.VAR_ACTUATOR_POOL),
        ),
        _now(s),
        _decisions(s),
        _verification(s),
        _freezes_and_budget(s),
        _audit_trail(s),
        _daemon(s),
    )


def _now(s: DashboardSettings) -> Section:
    return [
        Row("Now"),
        stat(
            "Mode",
            q.ACTUATOR_ACTIVE,
            "none",
            steps((None, "blue"), (1, "green")),
            width=4,
            description="1: acting (applies its actions to the fleet); 0: advisory (decides, logs and proposes, "
            "touches nothing).",
        ),
        stat(
            "Replicas leading",
            q.ACTUATOR_LEADERS,
            "none",
            LEADERS,
            width=4,
            description="Replicas holding the leadership: exactly one when healthy.",
        ),
        stat(
            "Frozen",
            q.ACTUATOR_FROZEN_NOW,
            "none",
            ON_OFF,
            width=4,
            description="1: frozen, deciding nothing (its inputs are stale or a source is down).",
        ),
        stat(
            "Fenced",
            q.ACTUATOR_FENCED_NOW,
            "none",
            ON_OFF,
            width=4,
            description="1: the leader's fencing token is behind its backend's and it could not re-acquire "
            "above it: it leads but cannot act.",
        ),
        stat(
            "Audit trail",
            q.ACTUATOR_AUDIT_FAILED_NOW,
            "none",
            ON_OFF,
            width=4,
            description="1: the audit trail (actuator.audit_db) was deleted, replaced or corrupted under the "
            "daemon: it does not act until the file is restored and the daemon restarted (pages).",
        ),
        stat(
            "Change budget used (worst)",
            q.ACTUATOR_BUDGET_NOW,
            "percentunit",
            BUDGET_BANDS,
            width=4,
            description="The highest share of a pool's (or the fleet's) hourly change budget used; at 1 the "
            "actuator refuses further changes there.",
        ),
    ]


def _decisions(s: DashboardSettings) -> Section:
    return [
        Row("Decisions"),
        ts(
            "Decisions and their reasons",
            q.ACTUATOR_DECISIONS,
            unit="short",
            width=24,
            description="Each decision on the timeline, by action, target and reason (advisory ones too); "
            "the words are in the audit trail: infercast actuator log.",
        ),
        ts(
            "Applied vs proposed (advisory)",
            q.ACTUATOR_APPLIED_VS_ADVISORY,
            unit="short",
            description="Actions applied to the fleet (acting) against actions only proposed (advisory mode, or "
            "a replica not leading), per scrape window.",
        ),
        ts(
            "Refused and failed actions (last hour)",
            q.ACTUATOR_REFUSALS,
            unit="short",
            description="Actions the guardrails or the backend refused, and actions that failed, per action and "
            "pool in the last hour.",
        ),
        ts(
            "Actions by outcome",
            q.ACTUATOR_ACTIONS,
            unit="short",
            description="Every action per scrape window by outcome: applied, advisory, refused, rolled back, failed.",
        ),
        ts(
            "Mode, leadership and fencing",
            q.ACTUATOR_MODE,
            q.ACTUATOR_LEADER,
            q.ACTUATOR_FENCED,
            unit="none",
            description="Acting (1) or advisory (0), how many replicas lead (1 when healthy), and whether the "
            "leader is fenced (1: it cannot act).",
        ),
        ts(
            "Pool weights set",
            q.ACTUATOR_WEIGHTS,
            unit="none",
            description="The router pool weights the actuator last set.",
        ),
        ts(
            "Breaker thresholds and admission limits set",
            q.ACTUATOR_BREAKERS,
            unit="none",
            description="latency: seconds; memory: ratio; context_tokens: tokens; *_queue: seconds.",
        ),
    ]


def _verification(s: DashboardSettings) -> Section:
    return [
        Row("Verification"),
        ts(
            "Verdicts",
            q.ACTUATOR_VERDICTS,
            unit="short",
            description="Verdicts on applied actions after their verification window: verified, no effect, "
            "rolled back.",
        ),
        ts(
            "Rollbacks (last hour)",
            q.ACTUATOR_ROLLBACKS,
            unit="short",
            description="Applied actions undone because the fleet got worse, per action and pool.",
        ),
    ]


def _freezes_and_budget(s: DashboardSettings) -> Section:
    return [
        Row("Freezes and budget"),
        ts(
            "Frozen",
            q.ACTUATOR_FROZEN,
            unit="none",
            hi=1,
            width=8,
            description="1 while the actuator is frozen.",
        ),
        ts(
            "Freezes by reason (last hour)",
            q.ACTUATOR_FREEZES,
            unit="short",
            width=8,
            description="Times the actuator froze in the last hour, by why (stale inputs, bad values, a source down).",
        ),
        ts(
            "Change budget used",
            q.ACTUATOR_BUDGET,
            unit="percentunit",
            thresholds=BUDGET_BANDS,
            width=8,
            description="Share of each pool's (and the fleet's) hourly change budget used.",
        ),
    ]


def _audit_trail(s: DashboardSettings) -> Section:
    return [
        Row("Audit trail"),
        ts(
            "Audit trail health",
            q.ACTUATOR_AUDIT_FAILED,
            q.ACTUATOR_AUDIT_UNRECORDED,
            unit="short",
            description="1 while the audit trail cannot be written (the actuator runs advisory), and the rows "
            "it could not write in the last hour (each logged whole at ERROR: audit: NOT RECORDED).",
        ),
        ts(
            "Decisions of unknown outcome",
            q.ACTUATOR_AUDIT_UNKNOWN,
            unit="short",
            description="Actions whose answer was lost and whose effect the target could not confirm yet; "
            "each tick reads them back (infercast actuator log shows them as unknown until settled).",
        ),
    ]


def _daemon(s: DashboardSettings) -> Section:
    return [
        Row("The daemon"),
        ts(
            "Decision-to-action latency",
            q.ACTUATOR_LATENCY_P50,
            q.ACTUATOR_LATENCY_P99,
            unit="s",
            width=8,
            description="From a decision to the backend's answer, retries included (goal: 1 s).",
        ),
        ts(
            "Loop runs by outcome",
            q.ACTUATOR_TICKS,
            unit="short",
            width=8,
            description="Runs of the control loop, on its schedule or on an alert: ok, error or missed.",
        ),
        ts(
            "Alerts from Alertmanager",
            q.ACTUATOR_ALERTS,
            unit="short",
            width=8,
            description="Alerts received on the actuator's webhook: accepted, duplicate or dropped.",
        ),
    ]
