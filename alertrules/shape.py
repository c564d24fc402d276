"""The shape of one alerting rule, shared by every module that writes alerts (rules.py, slo.py)."""

from __future__ import annotations

from typing import Any

from infercast.durations import duration


def alert_rule(
    *,
    name: str,
    expr: str,
    for_s: int,
    severity: str,
    team: str,
    summary: str,
    description: str,
    **labels: str,
) -> dict[str, Any]:
    """One alerting rule; `for_s` 0 leaves `for:` out.  Runbook links are added by `with_runbooks`."""
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_s:
        rule["for"] = duration(for_s)
    rule["labels"] = {"severity": severity, "team": team, **labels}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule
