"""The Alertmanager configuration: routes by severity and team, grouping by pool and version, inhibition.

Pure: URLs and options in, a config document out.  Alertmanager 0.25 reads no environment variables and its
webhook receiver has no `url_file`, so "configurable URL" means: generate the file with the URLs you need
(`python -m infercast.alertrules.generate --actuator-url ... --pager-url ...`); the committed files are the loopback
defaults (alertrules/alertmanager.yml, for deploy/local-stack.sh) and the compose one (deploy/alertmanager.yml).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

TEAMS = ("serving", "hardware", "platform")
#: how each team's alerts are grouped into one notification
TEAM_GROUP_BY = {
    "serving": ["alertname", "pool", "version"],
    "hardware": ["alertname", "node", "gpu"],
    "platform": ["alertname", "pool", "job", "target"],
}
TEMPLATE_FILE = "infercast.tmpl"


@dataclass(frozen=True)
class Receivers:
    """Where notifications go.

    `pager` is where critical alerts page, `chat` where warnings land: a plain webhook each by default (a
    loopback receiver in tests, any webhook bridge in production), or Slack / PagerDuty with the templates in
    alertrules/templates/ (their secrets are read from files, never written into the config).
    """

    actuator_url: str = "http://127.0.0.1:9402/api/v1/alerts"
    #: a file holding the bearer token the actuator's webhook expects (its `actuator.webhook.token_env`); None: none
    actuator_token_file: str | None = None
    pager_url: str = "http://127.0.0.1:9095/pager"
    chat_url: str = "http://127.0.0.1:9095/chat"
    #: where tickets go (a ticketing bridge's webhook): a slow burn of the error budget, no one woken
    ticket_url: str = "http://127.0.0.1:9095/ticket"
    #: the dead man's switch: InfercastWatchdog arrives here every minute; whatever watches it pages when it stops
    watchdog_url: str = "http://127.0.0.1:9095/watchdog"
    pager: Literal["webhook", "pagerduty"] = "webhook"
    chat: Literal["webhook", "slack"] = "webhook"
    pagerduty_key_file: str = "/etc/alertmanager/secrets/pagerduty-routing-key"
    slack_url_file: str = "/etc/alertmanager/secrets/slack-webhook-url"
    template_dir: str = "templates"


def _pager(r: Receivers, team: str) -> dict[str, Any]:
    pagerduty = {
        "routing_key_file": r.pagerduty_key_file,
        "description": '{{ template "infercast.pagerduty.description" . }}',
        "details": {"firing": '{{ template "infercast.pagerduty.details" . }}', "team": team},
        "send_resolved": True,
    }
    return _receiver(f"pager-{team}", r.pager_url, ("pagerduty_configs", pagerduty) if r.pager == "pagerduty" else None)


def _chat(r: Receivers, team: str) -> dict[str, Any]:
    slack = {
        "api_url_file": r.slack_url_file,
        "channel": f"#infercast-{team}",
        "title": '{{ template "infercast.slack.title" . }}',
        "text": '{{ template "infercast.slack.text" . }}',
        "send_resolved": True,
    }
    return _receiver(f"chat-{team}", r.chat_url, ("slack_configs", slack) if r.chat == "slack" else None)


def _receiver(name: str, url: str, native: tuple[str, dict[str, Any]] | None) -> dict[str, Any]:
    """A receiver: the integration's own config (`native`: its key and config) when one is chosen, else a webhook
    to `url`."""
    if native is not None:
        key, config = native
        return {"name": name, key: [config]}
    return {"name": name, "webhook_configs": [{"url": url, "send_resolved": True}]}


def _actuator_webhook(r: Receivers) -> dict[str, Any]:
    hook: dict[str, Any] = {"url": r.actuator_url, "send_resolved": True, "max_alerts": 0}
    if r.actuator_token_file:
        hook["http_config"] = {"authorization": {"type": "Bearer", "credentials_file": r.actuator_token_file}}
    return hook


def alertmanager_config(r: Receivers | None = None) -> dict[str, Any]:
    """Alertmanager's configuration: the route tree, the inhibit rules and the receivers (`r`: default when None)."""
    r = r or Receivers()
    return {
        "global": {"resolve_timeout": "5m"},
        "templates": [f"{r.template_dir}/{TEMPLATE_FILE}"],
        "route": _route(),
        "inhibit_rules": _inhibit_rules(),
        "receivers": _receivers(r),
    }


def _route() -> dict[str, Any]:
    """The route tree: the watchdog alone, information nowhere, the actuator's alerts to it first, then each team's
    alerts by severity (page, ticket or chat)."""
    team_routes = [
        {
            "matchers": [f'team="{team}"'],
            "group_by": TEAM_GROUP_BY[team],
            "receiver": f"chat-{team}",
            "routes": [
                {"matchers": ['severity="critical"'], "receiver": f"pager-{team}"},
                {"matchers": ['severity="ticket"'], "receiver": f"ticket-{team}"},
                {"matchers": ['severity="warning"'], "receiver": f"chat-{team}"},
            ],
        }
        for team in TEAMS
    ]
    return {
        # an alert no route matches (no team label) reaches the platform chat: only a critical with a team pages
        "receiver": "chat-platform",
        "group_by": ["alertname", "pool", "version"],
        "group_wait": "30s",
        "group_interval": "5m",
        "repeat_interval": "4h",
        "routes": [
            # The dead man's switch, alone and every minute: its silence is what pages (outside Alertmanager).
            {
                "matchers": ['alertname="InfercastWatchdog"'],
                "receiver": "watchdog",
                "group_by": ["alertname"],
                "group_wait": "0s",
                "group_interval": "1m",
                "repeat_interval": "1m",
            },
            # Information only (e.g. "the actuator acted"): visible in Alertmanager, never notified.
            {"matchers": ['severity="info"'], "receiver": "blackhole"},
            # What the actuator acts on reaches it at once, and then people as usual (continue).
            {
                "matchers": ['actuator="notify"'],
                "receiver": "infercast-actuator",
                "group_by": ["alertname", "pool", "version"],
                "group_wait": "0s",
                "group_interval": "30s",
                "repeat_interval": "5m",
                "continue": True,
            },
            *team_routes,
        ],
    }


def _inhibit_rules() -> list[dict[str, Any]]:
    return [
        # A critical for a pool silences that pool's warnings; the predictive warning stays visible.
        # `pool=~".+"` keeps alerts without a pool (GPU, pipeline) from inhibiting each other.
        {
            "source_matchers": ['severity="critical"', 'pool=~".+"'],
            "target_matchers": ['severity="warning"', 'kind!="predictive"'],
            "equal": ["pool"],
        },
        # The threshold alert is hidden only while the actuator's action is verified working: the Mitigated
        # alert holds only while the fullest instance's KV usage falls and no request of the pool was refused
        # or failed in 5 minutes (rules.py).  Nothing hides the SLO pages.
        {
            "source_matchers": ['alertname="InfercastKVCacheForecastBreachMitigated"'],
            "target_matchers": ['alertname="InfercastKVCacheUsageHigh"'],
            "equal": ["pool", "version"],
        },
        # An SLO page for a pool silences the same SLO's ticket there (the page says more, and sooner).
        {
            "source_matchers": ['alertname=~"Infercast(Availability|Latency)BurnRate(Fast|Slow)"'],
            "target_matchers": ['severity="ticket"'],
            "equal": ["pool", "version", "slo"],
        },
    ]


def _receivers(r: Receivers) -> list[dict[str, Any]]:
    return [
        {"name": "blackhole"},
        {"name": "infercast-actuator", "webhook_configs": [_actuator_webhook(r)]},
        *[_pager(r, t) for t in TEAMS],
        *[_chat(r, t) for t in TEAMS],
        *[{"name": f"ticket-{t}", "webhook_configs": [{"url": r.ticket_url, "send_resolved": True}]} for t in TEAMS],
        {"name": "watchdog", "webhook_configs": [{"url": r.watchdog_url, "send_resolved": False}]},
    ]
