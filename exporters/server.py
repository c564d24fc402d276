"""The exporter: scrape every source concurrently, keep the last good reading, derive, serve `/metrics`.

One scrape cycle (`Exporter.scrape`) starts every source in a thread pool and waits at most the per-target
timeout (`config.exporter.scrape_timeout_seconds`) for all of them together: a dead target fails fast, a slow one
is abandoned at the deadline (and not started again while its previous request still runs), so a cycle never
takes much longer than the timeout.  Each source's samples pass through its `Windows` (windowed ratios, integrated
counters), then the derived scores are computed from everything fresh, and the result is turned into metric
families once per cycle; `collect()` only hands those out.

A target that fails keeps its last good samples for `config.exporter.staleness_seconds` (so one lost scrape does
not punch holes in every graph) while `infercast_target_up` says 0 at once; the reason is logged once per change.

Faults inside a page that is up are visible and local: each family the target's engine must expose gets
`infercast_target_metric_missing{target,metric}` (1 while absent: an engine upgrade renamed it, say), and a family
dropped as malformed (the rest of the page kept) counts in `infercast_target_parse_errors_total{target,family}`;
each is logged once when it starts and once when it ends, not every cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from infercast import exposition
from infercast.alertrules.sources import ENGINE_GIVEN, ENGINES
from infercast.catalog import (
    GPU_FAMILIES,
    ROUTER_REQUESTS_TOTAL,
    TARGET_METRIC_MISSING,
    TARGET_PARSE_ERRORS_TOTAL,
    TARGET_SCRAPE_DURATION_SECONDS,
    TARGET_UP,
)
from infercast.config import ConfigError, FleetConfig
from infercast.exporters.base import FAMILY_DROPPED, METRIC_MISSING, SERVING_UP, Sample, ScrapeError, Target
from infercast.exporters.derive import derive
from infercast.exporters.router import RouterRecorder, apply_ingest, known_label_sets, recorder_samples
from infercast.exporters.sources import SERVING_KINDS, HttpSource, Source
from infercast.exporters.windows import Windows
from infercast.httpserve import (
    FROM_ENV,
    TOKEN_ENV,
    HttpError,
    HttpService,
    Limits,
    Request,
    Response,
    Route,
    is_loopback,
)

log = logging.getLogger(__name__)
MAX_INGEST_BYTES = 1024 * 1024


def engine_labels(labels: Mapping[str, str], target_name: str, url: str | None) -> dict[str, str]:
    """A serving series' labels as the engine's own scrape gives them (`metrics.source: engines`): `instance` is
    the engine's address (host:port of its URL: what Prometheus' engine job sets, so rules join the two on it), and
    the part of the exporter's instance after the target name (vLLM's data-parallel `engine`, SGLang's `dp<rank>`,
    Triton's `v<model version>`) goes to an `engine` label.  Scraped without honor_labels, Prometheus stores the
    `instance` as `exported_instance` (the engines-mode rules read it there)."""
    inst = labels.get("instance")
    if url is None or inst is None or not (inst == target_name or inst.startswith(f"{target_name}/")):
        return dict(labels)
    out = {**labels, "instance": urlsplit(url).netloc}
    if inst != target_name:
        out["engine"] = inst.removeprefix(f"{target_name}/")
    return out


@dataclass
class TargetState:
    source: Source
    windows: Windows
    pool: str | None = None
    version: str | None = None
    gpu_pool: str | None = None
    samples: list[Sample] = field(default_factory=list)
    good_at: float | None = None
    up: bool = False
    reason: str | None = "not scraped yet"
    duration: float = 0.0
    future: Future | None = None
    expected: tuple[str, ...] = ()  # the families its engine must expose (their current names)
    missing: frozenset[str] = frozenset()  # of those, absent from the last good page
    dropped: dict[str, str] = field(default_factory=dict)  # family -> why it was dropped from the last good page
    parse_errors: Counter[str] = field(default_factory=Counter)  # family -> scrapes that dropped it


#: builds the source of a target the exporter does not scrape over HTTP, from the fleet file and the target's name
SourceFactory = Callable[[FleetConfig, str], Source]
#: the target kind whose source is handed in: the fleet twin, an in-process simulation.  The twin is the
#: simulator's (infercast/simulator/): whoever runs the exporter on it builds its source and passes it here
#: (`infercast exporter` does, through infercast/tools/cli.py), so the exporter never imports the simulator
#: (tests/test_layers.py).
HANDED_IN = "twin"


def build_sources(config: FleetConfig, *, twin: Source | None = None) -> list[Source]:
    """One source per configured target; every `kind: twin` target is `twin`, which the caller built (a
    `ConfigError` when the fleet file has one and no twin was handed in)."""
    out: list[Source] = []
    for tc in config.targets:
        if tc.kind == HANDED_IN:
            if twin is None:
                raise ConfigError(
                    f"target {tc.name!r}: kind twin is the fleet twin, which this exporter was not given (run it "
                    "with `infercast exporter`, which builds the twin from the fleet file)"
                )
            out.append(twin)
        else:
            target = Target.from_config(tc, config)
            ex = config.exporter
            out.append(
                HttpSource(target, ex.scrape_timeout_seconds, ex.max_body_bytes, max_series=ex.max_series_per_target)
            )
    return out


class Exporter:
    """Sources in, metric families out; a prometheus_client custom collector."""

    def __init__(
        self,
        config: FleetConfig,
        sources: Iterable[Source],
        *,
        recorder: RouterRecorder | None = None,
        forecast_usage: Callable[[], Mapping[str, float] | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        fleet_view: bool = True,
    ) -> None:
        """`fleet_view=False` is the per-node exporter (`infercast exporter --gpus-only`): it serves its sources and
        nothing fleet-wide -- no router counters (the fleet exporter's, else every node would repeat them) and no
        derived pool scores (they need the whole fleet's samples)."""
        self.config = config
        self.fleet_view = fleet_view
        # `metrics.source: engines`: Prometheus scrapes the engines itself and their rules record KV usage and batch
        # saturation, so those are not emitted again, and the rest keeps the engine's own address
        self.reduced = config.metrics.source == ENGINES
        self.timeout = config.exporter.scrape_timeout_seconds
        self.staleness = config.exporter.staleness_seconds
        self.recorder = recorder if recorder is not None else RouterRecorder()
        # The label sets the fleet file announces start at 0 (rate() and alerts work from the first scrape) once a
        # router is known to count into this exporter: the fleet twin's (a twin target) or a router's recorder
        # handed in at once, any other on its first POST to /ingest/router (`router_reported`).  Without a router
        # there are no router series at all: zero-valued counters made the predictor forecast 0 req/s for a busy
        # fleet (issue 38 item 2).
        self._router_preset = False
        if fleet_view and (recorder is not None or any(t.kind == "twin" for t in config.targets)):
            self.router_reported()
        self._router_windows = Windows(config.exporter.hit_ratio_window_seconds)
        self._forecast_usage = forecast_usage
        self._clock = clock
        self.states: list[TargetState] = []
        by_name = {t.name: t for t in config.targets}
        for src in sources:
            tc = by_name.get(src.name)
            st = TargetState(src, Windows(config.exporter.hit_ratio_window_seconds))
            expected = getattr(getattr(src, "_module", None), "EXPECTED", ())
            st.expected = tuple(names[0] for names in expected)
            if tc is not None:
                st.pool = tc.pool
                st.version = tc.version or (config.pools[tc.pool].version if tc.pool else None)
                st.gpu_pool = tc.pool if tc.kind == "dcgm" else None
            self.states.append(st)
        # twice the targets: threads still finishing an abandoned request never delay this cycle's (made on demand)
        self._executor = ThreadPoolExecutor(max_workers=min(512, 2 * len(self.states) + 4), thread_name_prefix="scrape")
        self._cycle = threading.Lock()
        self._frame: list[Metric] = []
        self.last_cycle_seconds = 0.0
        self.last_cycle_at: float | None = None

    def router_reported(self) -> None:
        """A router counts into this exporter: start the fleet file's router label sets at 0 (once)."""
        if self.fleet_view and not self._router_preset:
            self.recorder.preset(*known_label_sets(self.config))
            self._router_preset = True
            log.info("a router reports to this exporter: its counters (%s) start at 0", ROUTER_REQUESTS_TOTAL)

    # --- scraping ----------------------------------------------------------------------------------------------
    @staticmethod
    def _run(source: Source) -> tuple[list[Sample], float, float]:
        t0 = time.monotonic()
        samples = source.collect()
        return samples, time.monotonic() - t0, source.now()

    def scrape(self) -> None:
        """One scrape cycle of every source; bounded by the per-target timeout."""
        with self._cycle:
            t0 = time.monotonic()
            deadline = t0 + self.timeout  # one deadline for the whole cycle, however long starting the threads took
            pending: dict[Future, TargetState] = {}
            for st in self.states:
                if st.future is not None and not st.future.done():
                    continue  # still running from an earlier cycle: reported below, not started twice
                st.future = self._executor.submit(self._run, st.source)
                pending[st.future] = st
            t_submit = time.monotonic()
            wait_futures(list(pending), timeout=max(0.0, deadline - time.monotonic()))
            t_wait = time.monotonic()
            now = self._clock()
            for st in self.states:
                fut = st.future
                if fut is None or not fut.done():
                    self._fail(st, f"timed out after {self.timeout:g}s", self.timeout)
                    continue
                if fut not in pending:
                    continue  # finished an abandoned scrape in between: its result is stale, rescrape next cycle
                try:
                    samples, duration, src_now = fut.result()
                except ScrapeError as e:
                    self._fail(st, str(e), time.monotonic() - t0)
                    continue
                except Exception as e:  # a source bug: reported as the target's reason, never a crash
                    self._fail(st, f"{type(e).__name__}: {e}", time.monotonic() - t0)
                    continue
                samples = self._diagnose(st, samples)
                resets = st.windows.resets
                st.samples = st.windows.apply(samples, src_now)
                if st.windows.resets > resets:
                    log.info("target %s: counters went down (restarted?); its windows start again", st.source.name)
                st.good_at = now
                st.duration = duration
                self._set_reason(st, None)
            t_process = time.monotonic()
            self._frame = self._build(now)
            self.last_cycle_seconds = time.monotonic() - t0
            log.debug(
                "cycle %.3fs: submit %.3fs, wait %.3fs, process %.3fs, build %.3fs",
                self.last_cycle_seconds,
                t_submit - t0,
                t_wait - t_submit,
                t_process - t_wait,
                time.monotonic() - t_process,
            )
            self.last_cycle_at = now

    def _diagnose(self, st: TargetState, samples: list[Sample]) -> list[Sample]:
        """Take the source's diagnostics out of its samples: note missing and dropped families, log each once."""
        missing, dropped, rest = set(), {}, []
        for s in samples:
            if s.name == METRIC_MISSING:
                missing.add(s.labels["metric"])
            elif s.name == FAMILY_DROPPED:
                dropped[s.labels["family"]] = s.labels["reason"]
            else:
                rest.append(s)
        name, kind = st.source.name, st.source.kind
        for m in sorted(missing - st.missing):
            log.warning(
                "target %s (%s): expected metric %s is missing from its page (renamed by an engine upgrade, or not "
                "enabled?): the series built from it stop (%s{target=%r,metric=%r} 1)",
                name, kind, m, TARGET_METRIC_MISSING, name, m,
            )  # fmt: skip
        for m in sorted(st.missing - missing):
            log.info("target %s (%s): metric %s is back", name, kind, m)
        for fam, why in sorted(dropped.items()):
            st.parse_errors[fam] += 1
            if fam not in st.dropped:
                log.warning("target %s (%s): family %s dropped, the rest of the page kept: %s", name, kind, fam, why)
        for fam in sorted(set(st.dropped) - set(dropped)):
            log.info("target %s (%s): family %s parses again", name, kind, fam)
        st.missing, st.dropped = frozenset(missing), dropped
        return rest

    def _fail(self, st: TargetState, reason: str, duration: float) -> None:
        st.duration = duration
        self._set_reason(st, reason)

    def _set_reason(self, st: TargetState, reason: str | None) -> None:
        st.up = reason is None
        if reason != st.reason:
            if reason is None:
                log.info("target %s (%s) is up", st.source.name, st.source.kind)
            else:
                log.warning("target %s (%s) is down: %s", st.source.name, st.source.kind, reason)
        st.reason = reason

    # --- the frame ---------------------------------------------------------------------------------------------
    def _build(self, now: float) -> list[Metric]:
        samples: list[Sample] = []
        gpu_pools: dict[tuple[str, str], str] = {}
        for st in self.states:
            fresh = st.good_at is not None and now - st.good_at <= self.staleness
            labels = {"target": st.source.name, "kind": st.source.kind}
            samples.append(Sample(TARGET_SCRAPE_DURATION_SECONDS, labels, st.duration))
            own_up = Sample(TARGET_UP, labels, 1.0 if st.up else 0.0)
            if st.source.kind in SERVING_KINDS and st.source.kind != "twin":
                pool, version = st.pool, st.version
                if pool is None or version is None:
                    first = next((s.labels for s in st.samples if "pool" in s.labels), None)
                    pool, version = (first["pool"], first["version"]) if first else (pool, version)
                if pool is not None and version is not None:
                    samples.append(Sample(SERVING_UP, {**labels, "pool": pool, "version": version}, own_up.value))
            samples.append(own_up)
            name = st.source.name
            for fam, n in sorted(st.parse_errors.items()):
                samples.append(Sample(TARGET_PARSE_ERRORS_TOTAL, {"target": name, "family": fam}, float(n)))
            if st.up:
                for m in st.expected:
                    samples.append(
                        Sample(TARGET_METRIC_MISSING, {"target": name, "metric": m}, 1.0 if m in st.missing else 0.0)
                    )
            if not fresh:
                continue
            for s in st.samples:
                if s.name == SERVING_UP and not st.up:
                    continue  # the twin's per-node view is only as current as the twin itself
                samples.append(s)
            if st.gpu_pool is not None:
                for s in st.samples:
                    if s.name in GPU_FAMILIES:
                        gpu_pools[(s.labels.get("node", ""), s.labels.get("gpu", ""))] = st.gpu_pool
        if self.fleet_view:
            samples.extend(self._router_windows.apply(recorder_samples(self.recorder), now))
            forecasts = self._forecast_usage() if self._forecast_usage else None
            samples.extend(derive(self.config, samples, gpu_pools, forecasts))
        if self.reduced:  # after the derived scores, which read them as the exporter names them
            samples = self._engines_view(samples)
        return families(samples)

    def _engines_view(self, samples: list[Sample]) -> list[Sample]:
        """`metrics.source: engines`: no family the engines' rules record (`ENGINE_GIVEN`), and each engine
        target's series under the engine's own address (`engine_labels`)."""
        urls = {
            st.source.name: url
            for st in self.states
            if (url := getattr(getattr(st.source, "target", None), "url", None)) is not None
        }
        out = []
        for s in samples:
            if s.name in ENGINE_GIVEN:
                continue
            inst = s.labels.get("instance")
            name = inst.split("/", 1)[0] if inst is not None and "pool" in s.labels else None
            if name in urls:
                s = Sample(s.name, engine_labels(s.labels, name, urls[name]), s.value)
            out.append(s)
        return out

    def collect(self) -> Iterable[Metric]:
        return list(self._frame)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def families(samples: Iterable[Sample]) -> list[Metric]:
    """Catalog samples -> metric families (`infercast.exposition.families`).

    Internal samples are dropped and a twin node's `_serving_up` becomes `infercast_target_up{target,kind}`.
    """

    def exposed() -> Iterable[tuple[str, Mapping[str, str], float]]:
        for s in samples:
            name, labels = s.name, s.labels
            if name == SERVING_UP:
                if "pool" not in labels or labels.get("kind") != "twin":
                    continue  # per-pool view of an HTTP target: only used by the health score
                name, labels = TARGET_UP, {"target": labels["target"], "kind": labels["kind"]}
            if name[0] != "_":
                yield name, labels, s.value

    return exposition.families(exposed())


# --- HTTP ------------------------------------------------------------------------------------------------------
class ExporterServer:
    """`GET /metrics` (scraping on request, at most once per `min_interval`) and `POST /ingest/router`.

    Served through `infercast.httpserve` (strict Content-Length, read deadline, bounded connections, JSON errors);
    the ingest changes state, so it needs the bearer token when `INFERCAST_HTTP_TOKEN` (or the file
    `INFERCAST_HTTP_TOKEN_FILE` names, or `token`) is set; listening beyond loopback with no token, it is refused
    (403) rather than open to anyone who can reach the port; a body declared as anything but JSON is a 415.
    """

    def __init__(
        self,
        exporter: Exporter,
        host: str = "127.0.0.1",
        port: int = 9400,
        min_interval: float = 1.0,
        *,
        limits: Limits | None = None,
        token: str | object | None = FROM_ENV,
    ):
        self.exporter = exporter
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(exporter)
        self.min_interval = min_interval
        self._lock = threading.Lock()
        routes = [
            Route("GET", "/metrics", self._metrics),
            Route("GET", "/", lambda _: Response.text("infercast exporter: GET /metrics, POST /ingest/router\n")),
            Route(
                "POST", "/ingest/router", self._ingest, mutates=True, max_body_bytes=MAX_INGEST_BYTES, json_body=True
            ),
        ]
        self.http = HttpService(
            routes, host, port, name="exporter", limits=limits or Limits(), token=token, closed_off_loopback=True
        )
        if not self.http.token and is_loopback(host):
            log.info("exporter: POST /ingest/router takes counts with no token (loopback only; set %s)", TOKEN_ENV)
        self.port = self.http.port

    def render(self) -> bytes:
        with self._lock:
            last = self.exporter.last_cycle_at
            if last is None or time.monotonic() - last >= self.min_interval:
                self.exporter.scrape()
        return generate_latest(self.registry)

    def _metrics(self, _: Request) -> Response:
        try:
            body = self.render()
        except Exception as e:  # never leave Prometheus without an answer
            log.exception("rendering /metrics failed")
            return Response.text(f"infercast exporter: {type(e).__name__}: {e}\n", 500)
        return Response(200, body, CONTENT_TYPE_LATEST)

    def _ingest(self, req: Request) -> Response:
        body = req.json()
        try:
            n = apply_ingest(self.exporter.recorder, body, self.exporter.config)
        except ValueError as e:
            raise HttpError(400, f"rejected, nothing applied: {e}") from None
        self.exporter.router_reported()
        return Response.json({"applied": n})

    def start(self) -> ExporterServer:
        self.http.start()
        return self

    def close(self) -> None:
        self.http.close()
        self.exporter.close()
