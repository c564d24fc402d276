"""Are the servers `infercast demo --prometheus URL --alertmanager URL` was given the ones its live arm needs?

`check_servers`, at once, before anything is started:
- each URL answers as what it claims to be: Prometheus' `GET /api/v1/status/buildinfo`, Alertmanager's
  `GET /api/v2/status` (an unreachable URL says so; a Prometheus given as `--alertmanager` is "not an
  Alertmanager");
- Prometheus holds infercast's rules generated for the demo's speed (every rule `infercast.alertrules.rules.rule_files`
  writes, each alert's `for:` divided by the speed), evaluated at least once per simulated step;
- Alertmanager has a webhook receiver at the address the demo listens on for its notifications.

`wait_until_scraped`, once the demo serves its exporter and forecasts: Prometheus sends alerts to that
Alertmanager, and scrapes both endpoints (the exporter's job with `honor_labels`, at least once per simulated
step) and its last scrape of each, made since the demo started serving, succeeded.  Given up after a deadline (the
discovery of new targets takes Prometheus up to 5 s, then two scrape intervals), naming everything still missing.
Every failure is a `LiveError` whose message says what is missing and how to fix it.
"""

from __future__ import annotations

import re
import socket
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import requests
import yaml

from infercast.alertrules.rules import rule_files
from infercast.alertrules.settings import AlertSettings
from infercast.durations import duration, parse_duration
from infercast.httpjson import get_json
from infercast.redact import redact_url
from infercast.simulator.control.arms import (
    STEP_SECONDS,
)  # the cadence of the pipeline, the forecasts and the control loop
from infercast.store import StoreError
from infercast.store.prometheus import PrometheusStore

DISCOVERY_SECONDS = 10.0  # Prometheus applies new targets and Alertmanagers at most every 5 s
READY_STACK = "deploy/local-stack.sh --no-services"


class LiveError(RuntimeError):
    """The live arm cannot run (or went wrong) for a reason the message states, with what to do."""


def how_to_load_rules(speed: float) -> str:
    if speed == 1:
        return f"load alertrules/rules/recording.yml and alertrules/rules/alerts.yml into it (`{READY_STACK}` does)"
    return (
        f"generate them for {speed:g}x with "
        f"`python -m infercast.alertrules.generate --out DIR --time-scale {speed:g}` and "
        f"load DIR/recording.yml and DIR/alerts.yml (`{READY_STACK} --time-scale {speed:g}` does)"
    )


def expected_rules(speed: float) -> dict[str, float | None]:
    """Rule name -> the alert's `for:` in seconds (0: none), or None for a recording rule, as generated for `speed`."""
    out: dict[str, float | None] = {}
    for doc in rule_files(AlertSettings().scaled(speed)).values():
        for group in doc["groups"]:
            for r in group["rules"]:
                out[r.get("alert") or r["record"]] = parse_duration(r.get("for", "0s")) if "alert" in r else None
    return out


def iso_seconds(text: str) -> float:
    """Unix seconds of an RFC 3339 time as Prometheus and Alertmanager write them (UTC, up to nanoseconds)."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z$", text)
    if m is None:
        return datetime.fromisoformat(text).timestamp()
    return datetime.fromisoformat(m[1]).replace(tzinfo=UTC).timestamp() + float(m[2] or 0)


def _ips(host: str) -> set[str]:
    try:
        return {a[4][0] for a in socket.getaddrinfo(host, None)}
    except OSError:
        return {host}


def same_address(url: str, host: str, port: int) -> bool:
    """Whether `url` (or `host:port`) reaches `host:port`: the same port, and the same host once resolved (any host
    when `host` is a wildcard address the demo listens on everywhere)."""
    parts = urlsplit(url if "//" in url else f"//{url}")
    if parts.port != port:
        return False
    return host in ("0.0.0.0", "::", "") or bool(_ips(parts.hostname or "") & _ips(host))


class Servers:
    """The user's Prometheus and Alertmanager, through their HTTP APIs."""

    def __init__(self, prometheus: str, alertmanager: str, timeout: float = 5.0) -> None:
        for flag, url in (("--prometheus", prometheus), ("--alertmanager", alertmanager)):
            if not url.startswith(("http://", "https://")):
                raise LiveError(f"{flag} must be an http:// or https:// URL, got {redact_url(url)!r}")
        self.http = requests.Session()
        self.timeout = timeout
        try:
            self.prometheus = PrometheusStore(prometheus, timeout, session=self.http)
        except StoreError as e:
            raise LiveError(str(e)) from None
        self.alertmanager = alertmanager.rstrip("/")
        self.shown_prometheus, self.shown_alertmanager = self.prometheus.shown_url, redact_url(self.alertmanager)

    def prom(self, path: str, params: dict[str, str] | None = None) -> Any:
        try:
            return self.prometheus.api(path, params)
        except StoreError as e:
            raise LiveError(str(e)) from None

    def am(self, path: str) -> Any:
        status, body = get_json(
            self.http, self.alertmanager, path, timeout=self.timeout, server="Alertmanager", error=LiveError
        )
        if status != 200 or body is None:
            raise LiveError(f"{self.shown_alertmanager}{path} answered HTTP {status}" + ("" if body else ", not JSON"))
        return body

    def _claims(self, flag: str, base: str, path: str, server: str, ok) -> Any:
        status, body = get_json(self.http, base, path, timeout=self.timeout, server=server, error=LiveError)
        if status != 200 or not ok(body):
            article = "an" if server[0] in "AEIOU" else "a"
            raise LiveError(f"{flag} {redact_url(base)} is not {article} {server}: GET {path} answered HTTP {status}"
                            f"{', not JSON' if body is None else ''}")  # fmt: skip
        return body

    def identify(self) -> tuple[str, str]:
        """(Prometheus' version, Alertmanager's version); LiveError when either URL is not what it should be."""
        prom = self._claims("--prometheus", self.prometheus.url, "/api/v1/status/buildinfo", "Prometheus",
                            lambda b: isinstance(b, dict) and "version" in (b.get("data") or {}))  # fmt: skip
        am = self._claims("--alertmanager", self.alertmanager, "/api/v2/status", "Alertmanager",
                          lambda b: isinstance(b, dict) and "config" in b and "versionInfo" in b)  # fmt: skip
        return prom["data"]["version"], (am["versionInfo"] or {}).get("version", "?")


def check_rules(servers: Servers, speed: float) -> float:
    """The slowest evaluation interval of infercast's rule groups (seconds); LiveError when Prometheus lacks rules,
    holds them for another speed, or evaluates them less than once per simulated step."""
    held: dict[str, list[float]] = {}
    intervals: dict[str, float] = {}
    for group in servers.prom("/api/v1/rules").get("groups", []):
        for r in group.get("rules", []):
            held.setdefault(r["name"], []).append(float(r.get("duration", 0)) if r.get("type") == "alerting" else -1)
            intervals[r["name"]] = float(group.get("interval", 0))
    want = expected_rules(speed)
    where = f"Prometheus at {servers.shown_prometheus}"
    missing = [n for n in want if n not in held]
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise LiveError(f"{where} lacks {len(missing)} of infercast's {len(want)} rules ({shown}): "
                        f"{how_to_load_rules(speed)}")  # fmt: skip
    for name, w in want.items():
        wrong = [d for d in held[name] if w is not None and d != w]
        if wrong:
            raise LiveError(
                f"{where} holds infercast's rules with other durations than --speed {speed:g} needs: {name} has for: "
                f"{duration(wrong[0])} where the rules for {speed:g}x say {duration(w)} (the rules for 1x say "
                f"{duration(expected_rules(1)[name] or 0)}): {how_to_load_rules(speed)}"
            )
    slowest = max(intervals[n] for n in want)
    _often_enough(f"{where} evaluates infercast's rules", slowest, speed, "set its evaluation_interval")
    return slowest


def _often_enough(doing: str, every: float, speed: float, fix: str) -> None:
    """LiveError when `every` wall seconds is more than one simulated step at `speed`."""
    if every * speed > STEP_SECONDS + 1e-9:
        raise LiveError(
            f"{doing} every {every:g} s, {every * speed:g} simulated seconds at --speed {speed:g}: the demo needs "
            f"{STEP_SECONDS / speed:g} s or less (one {STEP_SECONDS:g} s step); {fix}, or run at a lower --speed"
        )


def check_webhook(servers: Servers, host: str, port: int) -> None:
    """LiveError unless one of Alertmanager's webhook receivers points at `host:port` (where the demo listens)."""
    cfg = yaml.safe_load(servers.am("/api/v2/status")["config"].get("original") or "") or {}
    urls = [w.get("url") or "" for r in cfg.get("receivers") or [] for w in r.get("webhook_configs") or []]
    if any(u == "<secret>" for u in urls):
        return  # this Alertmanager hides its webhook URLs: what it delivers is checked after the run instead
    if not any(same_address(u, host, port) for u in urls):
        raise LiveError(
            f"Alertmanager at {servers.shown_alertmanager} has no webhook at {host}:{port}, where the demo listens for "
            f"its notifications (its webhooks: {', '.join(sorted(set(urls))) or 'none'}): load "
            "alertrules/alertmanager.yml (its infercast-actuator receiver is http://127.0.0.1:9402/api/v1/alerts; "
            f"`{READY_STACK}` runs one with it), or pass --webhook-listen with the address of one of its webhooks"
        )


def _job(servers: Servers, name: str) -> dict:
    cfg = yaml.safe_load(servers.prom("/api/v1/status/config").get("yaml") or "") or {}
    return next((j for j in cfg.get("scrape_configs") or [] if j.get("job_name") == name), {})


def _target_problem(servers: Servers, t: dict, what: str, since: float, speed: float, labels: bool) -> str | None:
    """Why target `t` (Prometheus' view of one of the demo's endpoints) does not do yet; LiveError when it never
    will (scraped too rarely, or without honor_labels)."""
    where = f"Prometheus at {servers.shown_prometheus}"
    every = parse_duration(t.get("scrapeInterval") or "1m")
    _often_enough(f"{where} scrapes {what}", every, speed, f"set job {t['scrapePool']}'s scrape_interval")
    if labels and not _job(servers, t["scrapePool"]).get("honor_labels"):
        raise LiveError(
            f"{where} scrapes {what} in job {t['scrapePool']} without honor_labels: true, so the exporter's own "
            "instance labels would be renamed and infercast's rules would not see them: add honor_labels: true to "
            "the job (deploy/prometheus.local.yml has it)"
        )
    if t.get("health") == "up" and iso_seconds(t["lastScrape"]) >= since:
        return None
    err = t.get("lastError") or "not scraped yet"
    return f"{where} has not scraped {what} successfully (job {t['scrapePool']}: {err})"


def wait_until_scraped(
    servers: Servers, endpoints: dict[str, tuple[str, int]], am_host: str, am_port: int, speed: float, since: float
) -> None:
    """Wait until Prometheus sends to the Alertmanager and has scraped each endpoint (what -> (host, port); the
    first is the exporter, whose job needs honor_labels) since `since`; LiveError naming what is missing.

    What its configuration lacks (a target, the Alertmanager) is final once Prometheus has had `DISCOVERY_SECONDS`
    since it last loaded its configuration; a target not scraped yet is given two scrape intervals more."""
    loaded = iso_seconds(servers.prom("/api/v1/status/runtimeinfo").get("lastConfigTime") or "1970-01-01T00:00:00Z")
    discovered = max(time.time(), loaded + DISCOVERY_SECONDS)
    where = f"Prometheus at {servers.shown_prometheus}"
    while True:
        missing, pending, every = [], [], 0.0
        sends = [a["url"] for a in servers.prom("/api/v1/alertmanagers").get("activeAlertmanagers", [])]
        if not any(same_address(u, am_host, am_port) for u in sends):
            missing.append(
                f"{where} sends its alerts to {', '.join(sends) or 'no Alertmanager'}, not to the Alertmanager at "
                f"{servers.shown_alertmanager}: add {am_host}:{am_port} under alerting.alertmanagers"
            )
        targets = servers.prom("/api/v1/targets", {"state": "active"}).get("activeTargets", [])
        for i, (what, (host, port)) in enumerate(endpoints.items()):
            t = next((t for t in targets if same_address(t.get("scrapeUrl", ""), host, port)), None)
            if t is None:
                listed = ", ".join(sorted({f"{x['scrapePool']}: {x['scrapeUrl']}" for x in targets})) or "none"
                missing.append(
                    f"{where} does not scrape {what} at {host}:{port} (its targets: {listed}): add a job for it "
                    "(deploy/prometheus.local.yml has infercast-exporter on 127.0.0.1:9400 and infercast-predictor "
                    "on 127.0.0.1:9401), or pass --exporter-listen / --predictor-listen with the addresses it scrapes"
                )
                continue
            every = max(every, parse_duration(t.get("scrapeInterval") or "1m"))
            if (p := _target_problem(servers, t, what, since, speed, labels=i == 0)) is not None:
                pending.append(p)
        if not missing and not pending:
            return
        now = time.time()
        late = pending if now > max(discovered, since + 2 * every + 2.0) else []  # else: not scraped *yet*
        if (missing and now > discovered) or late:
            raise LiveError("; and ".join(missing + late))
        time.sleep(0.5)


__all__ = ["LiveError", "Servers", "check_rules", "check_webhook", "iso_seconds", "same_address", "wait_until_scraped"]
