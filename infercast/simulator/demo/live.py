"""The demo's live arm: `predictive` through the user's Prometheus and Alertmanager, on the wall clock.

`infercast demo --prometheus URL --alertmanager URL [--speed S]` runs the `predictive` arm through the one driver
(`infercast.simulator.control.driver.run_arm`) with `LivePipeline` in place of the embedded one; the other arms stay in
memory.

- The demo serves the twin's exporter (`--exporter-listen`, default 127.0.0.1:9400) and the predictor's forecasts
  (`--predictor-listen`, 127.0.0.1:9401), the addresses `deploy/prometheus.local.yml` scrapes, and listens for
  Alertmanager's notifications on the actuator's webhook address (`--webhook-listen`, 127.0.0.1:9402, where
  alertrules/alertmanager.yml sends what the actuator acts on, at once): the demo stands in for the actuator.
- The twin is paced onto the wall clock, `S` simulated seconds per wall second (`infercast.wallclock.Paced`):
  each 15 s step waits for its wall time, the exporter's frame is rebuilt, the predictor forecasts from what
  Prometheus scraped (read through `infercast.store.paced.PacedStore`), its forecasts are served for Prometheus to
  scrape (last-success times on the wall clock, as `infercast predictor` publishes them), and the control loop
  acts on what Prometheus holds.  The predictor and the control loop keep the fleet file's durations in simulated
  seconds; Prometheus' rules must be generated for S (`live_check`); Alertmanager's own timings are wall time.
- The page is the first firing `InfercastKVCacheForecastBreach` notification that reached the webhook; its
  arrival, on the simulated clock, is the arm's page time (the lead is counted from the unprotected fleet's
  crossing, as for every arm).  If none arrived, `why_no_page` asks Prometheus and Alertmanager why.
- If the machine cannot keep pace, the twin falls behind the wall clock: how far (in simulated seconds) is
  reported as `behind_seconds`, and everything the live arm read lagged by as much.

`close()` stops what the demo started (its three listeners), never the user's servers.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from infercast.alertrules.webhook import WebhookRecorder
from infercast.catalog import FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS
from infercast.config import parse_listen
from infercast.simulator.control.driver import Pipeline
from infercast.simulator.demo.live_check import (
    LiveError,
    Servers,
    check_rules,
    check_webhook,
    iso_seconds,
    wait_until_scraped,
)
from infercast.store import StoreError
from infercast.store.paced import PacedStore
from infercast.wallclock import Paced

PAGE_ALERT = "InfercastKVCacheForecastBreach"
LIVE_ARMS = ("predictive",)


@dataclass(frozen=True)
class LiveOptions:
    prometheus: str
    alertmanager: str
    speed: float = 1.0
    exporter_listen: str = "127.0.0.1:9400"
    predictor_listen: str = "127.0.0.1:9401"
    webhook_listen: str = "127.0.0.1:9402"


def _address(flag: str, value: str) -> tuple[str, int]:
    try:
        return parse_listen(value)
    except ValueError:
        raise LiveError(f"{flag} {value!r}: expected HOST:PORT, e.g. 127.0.0.1:9400") from None


class Live:
    """The live arm's side of the servers: checked by `open()`, served while the arm runs, closed by `close()`."""

    arms = LIVE_ARMS

    def __init__(self, opts: LiveOptions, say: Callable[[str], None] = lambda line: None) -> None:
        if not opts.speed > 0 or not math.isfinite(opts.speed):
            raise LiveError(f"--speed must be a positive number, got {opts.speed:g}")
        self.opts, self.say = opts, say
        self.addr = {
            flag: _address(flag, value)
            for flag, value in (("--exporter-listen", opts.exporter_listen), ("--predictor-listen",
                                opts.predictor_listen), ("--webhook-listen", opts.webhook_listen))
        }  # fmt: skip
        self.servers = Servers(opts.prometheus, opts.alertmanager)
        self.services: list[tuple[str, object]] = []  # (what, service) the demo started, in order; close() stops them
        self.webhook: WebhookRecorder | None = None
        self.clock: Paced | None = None
        self.behind = 0.0  # simulated seconds the twin fell behind the wall clock, at most
        self.versions = ("?", "?")
        from infercast.predictors.publish import LatestSamples

        self.latest = LatestSamples()

    def open(self) -> Live:
        """Check the servers (`live_check`) and listen for Alertmanager's notifications; LiveError if unfit."""
        self.versions = self.servers.identify()
        check_rules(self.servers, self.opts.speed)
        host, port = self.addr["--webhook-listen"]
        check_webhook(self.servers, host, port)
        self.webhook = self._bind("--webhook-listen", lambda: WebhookRecorder(host, port).serve())
        return self

    def _bind(self, flag: str, start):
        host, port = self.addr[flag]
        try:
            service = start()
        except OSError as e:
            raise LiveError(f"cannot listen on {host}:{port}: {e.strerror or e} (is another infercast service "
                            f"running there?); stop it or pass {flag} HOST:PORT") from None  # fmt: skip
        what = flag.removeprefix("--").removesuffix("-listen").replace("predictor", "forecasts")
        self.services.append((f"{what} on {host}:{port}", service))
        return service

    def pipeline(self, cfg, recorder) -> LivePipeline:
        return LivePipeline(cfg, recorder, self)

    def serve(self, exporter, sim_now: float) -> PacedStore:
        """Serve the exporter and the forecasts, wait until Prometheus scrapes both, start the paced clock."""
        from infercast.exporters.server import ExporterServer
        from infercast.predictors.cli import forecasts_service

        eh, ep = self.addr["--exporter-listen"]
        # min_interval=inf: a scrape never advances the twin's view; the pipeline rebuilds the frame each step
        self._bind("--exporter-listen", lambda: ExporterServer(exporter, eh, ep, min_interval=math.inf).start())
        self._bind("--predictor-listen", lambda: forecasts_service(self.latest, self.opts.predictor_listen))
        self.say(f"waiting for Prometheus at {self.servers.shown_prometheus} to scrape the exporter ({eh}:{ep}) and "
                 f"the forecasts ({self.opts.predictor_listen})")  # fmt: skip
        since = time.time()
        parts = urlsplit(self.servers.alertmanager)
        endpoints = {"the demo's exporter": (eh, ep), "the demo's forecasts": self.addr["--predictor-listen"]}
        am_port = parts.port or (443 if parts.scheme == "https" else 80)
        wait_until_scraped(self.servers, endpoints, parts.hostname or "", am_port, self.opts.speed, since)
        self.clock = Paced(time.time(), sim_now, self.opts.speed)
        return PacedStore(self.servers.prometheus, self.clock)

    def pace(self, sim_now: float) -> None:
        """Wait until the wall clock reaches simulated time `sim_now` (or note how far behind it the twin is)."""
        delay = self.clock.wall(sim_now) - time.time()
        if delay > 0:
            time.sleep(delay)
        else:
            self.behind = max(self.behind, -delay * self.opts.speed)

    def publish(self, samples) -> None:
        """Serve the forecasts; the last-success times on the wall clock, which Prometheus' staleness rule reads."""
        self.latest.set(
            dataclasses.replace(s, value=self.clock.wall(s.value)) if s.name == FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS
            else s
            for s in samples
        )  # fmt: skip

    def run(self, cfg, seed: int, trace, progress):
        """The `predictive` arm, live (an `ArmRun` whose page is the notification Alertmanager delivered)."""
        from infercast.simulator.demo.run import run_one

        t0 = time.time()
        run = run_one(cfg, "predictive", seed, trace, None, progress, pipeline=self.pipeline)
        run.page_seconds, page = self.page()
        self.close()  # Prometheus is not left scraping a frozen twin while the other arms run
        run.page_alert = f"{PAGE_ALERT}, as Alertmanager delivered it"
        run.live = {**self.describe(), "wall_seconds": round(time.time() - t0, 1), "page": page}
        run.live["behind_seconds"] = round(self.behind, 1)
        return run

    def page(self) -> tuple[float | None, dict]:
        """(simulated time of the first page the webhook received, what it was) or (None, why there was none)."""
        n = self.webhook.first(PAGE_ALERT)
        delivered = sorted({a for x in self.webhook.received() for a in x.alertnames})
        if n is None or self.clock is None:
            return None, {"delivered_alerts": delivered, "none_because": self.why_no_page()}
        alert = next(a for a in n.payload["alerts"] if a["labels"].get("alertname") == PAGE_ALERT)
        fired = iso_seconds(alert["startsAt"]) if alert.get("startsAt") else None
        page = self.clock.sim(n.received_at)
        return round(page, 1), {
            "alertname": PAGE_ALERT,
            "receiver": n.payload.get("receiver"),
            "sent_by": n.payload.get("externalURL"),  # the Alertmanager that delivered it
            "labels": alert["labels"],
            "delivered_at": datetime.fromtimestamp(n.received_at, UTC).isoformat(),
            "delivered_sim_seconds": round(page, 1),
            "fired_sim_seconds": None if fired is None else round(self.clock.sim(fired), 1),
            "delivered_alerts": delivered,
        }

    def why_no_page(self) -> str:
        if self.clock is None:
            return "the live arm did not start"
        try:
            fired = self.servers.prometheus.query_range(
                "ALERTS", {"alertname": PAGE_ALERT, "alertstate": "firing"}, self.clock.t0, time.time(), 1.0
            )
            held = self.servers.am(f'/api/v2/alerts?filter=alertname="{PAGE_ALERT}"')
        except (LiveError, StoreError) as e:  # the servers went away: say so rather than guess
            return f"the servers could not be asked why: {e}"
        if not fired:
            return f"{PAGE_ALERT} never fired in Prometheus during the run"
        to = sorted({r["name"] for a in held for r in a.get("receivers", [])})
        return (
            f"{PAGE_ALERT} fired in Prometheus but no notification reached the demo's webhook at "
            f"{self.opts.webhook_listen} (Alertmanager routes it to: {', '.join(to) or 'nothing it holds now'})"
        )

    def describe(self) -> dict:
        o = self.opts
        return {
            "arms": list(LIVE_ARMS),
            "prometheus": self.servers.shown_prometheus,
            "prometheus_version": self.versions[0],
            "alertmanager": self.servers.shown_alertmanager,
            "alertmanager_version": self.versions[1],
            "speed": o.speed,
            "exporter": o.exporter_listen,
            "forecasts": o.predictor_listen,
            "webhook": o.webhook_listen,
        }

    def close(self) -> list[str]:
        """Stop what the demo started (newest first); what was stopped, in words."""
        stopped = []
        while self.services:
            what, service = self.services.pop()
            service.close()
            stopped.append(what)
        return stopped


class LivePipeline(Pipeline):
    """The predictive arm's pipeline through the user's Prometheus: the same exporter and predictor loop as the
    embedded `Pipeline`, but the store is Prometheus (what it scraped from the demo) on the paced clock."""

    def __init__(self, cfg, recorder, live: Live) -> None:
        super().__init__(cfg, recorder)
        self.live = live

    def attach(self, fleet) -> None:
        super().attach(fleet)
        self.exporter.scrape()  # the fleet at the start: what Prometheus scrapes while the demo waits for it
        self.store = self.live.serve(self.exporter, fleet.now)

    def step(self, now: float) -> None:
        self.live.pace(now)
        self.exporter.scrape()
        samples = self.predictor.tick(now, self.store)
        self.live.publish(samples)
        self.forecasts.extend((now, s) for s in samples)


__all__ = ["LIVE_ARMS", "Live", "LiveError", "LiveOptions", "LivePipeline"]
