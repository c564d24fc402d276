"""`infercast exporter --config FILE [--listen HOST:PORT] [--once]`: serve the catalog metrics of a fleet."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from infercast.catalog import TARGET_UP
from infercast.config import ConfigError, load_config, parse_listen
from infercast.exporters.forecasts import PrometheusForecasts
from infercast.exporters.nvml import NvmlSource, find_gpus
from infercast.exporters.server import Exporter, ExporterServer, SourceFactory, build_sources
from infercast.wallclock import Paced

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        required=True,
        help="fleet file (pools, versions, targets, exporter settings), or a shipped example by name: flash-sale",
    )
    p.add_argument("--listen", default=None, help="HOST:PORT to serve /metrics on (default: config exporter.listen)")
    p.add_argument("--once", action="store_true", help="scrape every target once, print the exposition, exit")
    p.add_argument(
        "--twin-warmup-seconds",
        type=float,
        default=60.0,
        help="simulated seconds to run an in-process twin before the first scrape (default 60)",
    )
    p.add_argument(
        "--twin-speed",
        type=float,
        default=1.0,
        help="serving mode: simulated seconds the twin advances per wall second (default 1 = real time)",
    )
    p.add_argument(
        "--nvml",
        dest="nvml",
        action="store_true",
        default=None,
        help=f'read this node\'s GPUs through NVML even when none is found (then {TARGET_UP}{{kind="nvml"}} '
        "says 0); default: only when NVML finds a GPU (NVML is optional: dcgm-exporter targets or --gpus-only "
        "DaemonSets give the GPU series too)",
    )
    p.add_argument("--no-nvml", dest="nvml", action="store_false", help="do not read GPUs through NVML")
    p.add_argument("--node", default=None, help="node name for NVML series (default: the host name)")
    p.add_argument(
        "--gpus-only",
        action="store_true",
        help="the per-node exporter (a DaemonSet on GPU nodes): serve this node's GPUs through NVML and nothing else "
        "(the fleet file's targets, router counters and derived scores are the fleet exporter's)",
    )
    p.add_argument(
        "--forecasts-from",
        default=None,
        metavar="PROMETHEUS_URL",
        help="Prometheus holding the predictor's forecasts, for the failover headroom in the avalanche risk "
        "(default: predictor.prometheus_url of the fleet file, if set)",
    )


def _listen(value: str) -> tuple[str, int]:
    try:
        return parse_listen(value)
    except ValueError:
        raise ConfigError(f"--listen {value!r}: expected HOST:PORT, e.g. 127.0.0.1:9400") from None


def build(args: argparse.Namespace, make_twin: SourceFactory | None = None):
    """(config, the twin's source or None, the exporter).  `make_twin` builds the source of a `kind: twin` target:
    the fleet twin is the simulator's, so the command line hands its factory in (infercast/tools/cli.py); without
    one, a fleet file with a twin target is refused (`build_sources`)."""
    config = load_config(args.config)
    if getattr(args, "gpus_only", False):
        return config, None, Exporter(config, [NvmlSource(node=args.node)], fleet_view=False)
    twin = None
    if make_twin is not None and any(t.kind == "twin" for t in config.targets):
        name = next(t.name for t in config.targets if t.kind == "twin")
        twin = make_twin(config, name)
    sources = build_sources(config, twin=twin)
    if use_nvml(args.nvml):
        sources.append(NvmlSource(node=args.node))
    # the twin's router counters come through its source (on simulated time); the exporter's own recorder takes
    # what other routers POST to /ingest/router
    forecasts_url = args.forecasts_from or config.predictor.prometheus_url
    forecasts = PrometheusForecasts(forecasts_url) if forecasts_url else None
    return config, twin, Exporter(config, sources, forecast_usage=forecasts)


def use_nvml(asked: bool | None, find=find_gpus) -> bool:
    """`--nvml`: yes; `--no-nvml`: no; neither: yes when NVML finds a GPU on this host (said in the log either way)."""
    if asked is not None:
        return asked
    n, why = find()
    if n:
        log.info("NVML: %d GPU(s) on this host; reading them (--no-nvml to stop)", n)
    else:
        log.info("NVML: not reading GPUs: %s (optional; --nvml to insist)", why)
    return bool(n)


def run(args: argparse.Namespace, *, make_twin: SourceFactory | None = None) -> int:
    """The exporter command; `make_twin` as in `build`."""
    if args.twin_warmup_seconds < 0 or args.twin_speed <= 0:
        raise ConfigError("--twin-warmup-seconds must be >= 0 and --twin-speed > 0")
    config, twin, exporter = build(args, make_twin)
    if args.once:
        if twin is not None and args.twin_warmup_seconds > 0:
            # two scrapes a window apart in simulated time, so windowed ratios (hit ratio, rates) have a span
            span = min(config.exporter.hit_ratio_window_seconds, args.twin_warmup_seconds / 2)
            twin.advance(args.twin_warmup_seconds - span)
            exporter.scrape()
            twin.advance(span)
        exporter.scrape()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(exporter)
        sys.stdout.write(generate_latest(registry).decode())
        exporter.close()
        return 0

    host, port = _listen(args.listen or config.exporter.listen)
    stop = threading.Event()
    if twin is not None:
        twin.advance(args.twin_warmup_seconds)
        threading.Thread(target=_drive_twin, args=(twin, args.twin_speed, stop), name="twin", daemon=True).start()
    server = ExporterServer(exporter, host, port).start()
    log.info("serving http://%s:%d/metrics for %d targets", host, server.port, len(exporter.states))
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.close()
    return 0


def _drive_twin(twin: Any, speed: float, stop: threading.Event, step: float = 0.5) -> None:  # a twin source
    """Advance the twin in (scaled) real time until stopped; a failing twin is logged and retried, not fatal.

    The twin is driven to where the wall clock says it should be (`infercast.wallclock.Paced`), not by the time
    elapsed since the last call: the twin advances in whole ticks and ends a call on the first tick boundary at or
    after the time asked for, so adding up elapsed times ran it fast (at 1x, a 0.5 s call took three 0.25 s
    ticks: the twin ran at 1.5x and its flash sale came 200 s before the calendar the predictor reads said)."""
    clock = Paced(time.monotonic(), twin.now(), speed)
    while not stop.wait(step):
        try:
            behind = clock.sim(time.monotonic()) - twin.now()
            if behind > 0:
                twin.advance(behind)
        except Exception:
            log.exception("the twin failed to advance")
