"""`infercast predictor --config FILE`: forecast KV usage and traffic from Prometheus and serve them as metrics.

APScheduler calls `PredictorLoop.tick(clock.now(), store)` every `predictor.forecast_interval_seconds` (one run at
a time: an overrunning tick makes the next one skip, a backlog is coalesced), the latest samples are served on
`predictor.listen` at /metrics.  SIGTERM or SIGINT stops the scheduler after the running tick (`shutdown(wait=True)`).
`--once` runs one tick and prints the samples in the text format (for cron jobs and checks).

`--shard I/N` (or $INFERCAST_PREDICTOR_SHARD) makes this replica one of N that split the fleet's (pool, version)
series by Prometheus' `hashmod` (predictors/shard.py): it forecasts and publishes only its share, and the rules and
dashboards, which aggregate over replicas, see the union.  `ordinal/N` takes I from the end of the host name (a
StatefulSet pod `infercast-predictor-1` is shard 1).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from infercast.config import ConfigError, PredictorConfig, load_config, parse_listen

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="fleet file (its `predictor:` section configures the service)")
    p.add_argument("--prometheus", default=None, help="Prometheus URL (overrides predictor.prometheus_url)")
    p.add_argument("--listen", default=None, help="host:port for /metrics (overrides predictor.listen)")
    p.add_argument("--once", action="store_true", help="run one tick, print the samples, exit")
    p.add_argument(
        "--kv-source",
        choices=("auto", "rules", "raw"),
        default="auto",
        help="read KV usage from the recording rules (pool_version:...:max/avg), the raw metric combined here, or "
        "the rules when they cover the window the model reads (default: auto; docs/predictors.md)",
    )
    p.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="forecast only shard I of N (by hashmod of pool and version); `ordinal/N` takes I from the host name "
        "(default: $INFERCAST_PREDICTOR_SHARD, else the whole fleet)",
    )


def _host_port(listen: str) -> tuple[str, int]:
    try:
        return parse_listen(listen, default_host="127.0.0.1")
    except ValueError:
        raise ConfigError(f"predictor.listen: expected host:port, got {listen!r}") from None


def forecasts_service(latest, listen: str):
    """The started HTTP service serving `latest` (a `LatestSamples`) at /metrics on `listen` (HOST:PORT)."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    from infercast.httpserve import HttpService, Response, Route

    registry = CollectorRegistry()
    registry.register(latest)
    host, port = _host_port(listen)
    # the shared HTTP front door (infercast/httpserve.py): read deadline, bounded connections, JSON errors
    metrics = Route("GET", "/metrics", lambda _: Response(200, generate_latest(registry), CONTENT_TYPE_LATEST))
    return HttpService([metrics], host, port, name="predictor").start()


def serve(
    loop, store, clock, listen: str, interval_s: float, stop: threading.Event, legacy_labels: bool = False
) -> None:
    """Run the loop on APScheduler until `stop` is set; serve the latest samples on `listen` (with the deprecated
    forecast labels too when `legacy_labels`: `predictor.legacy_forecast_labels`)."""
    from apscheduler.schedulers.background import BackgroundScheduler

    from infercast.predictors.publish import LatestSamples

    latest = LatestSamples(legacy_labels)
    http = forecasts_service(latest, listen)
    host, port = http.host, http.port

    def job() -> None:
        try:
            latest.set(loop.tick(clock.now(), store))
        except Exception:  # a bug in one tick must not kill the service; the next tick tries again
            log.exception("predictor: tick failed")

    sched = BackgroundScheduler(
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": max(1, int(interval_s))}
    )
    from datetime import UTC, datetime

    sched.add_job(job, "interval", seconds=interval_s, next_run_time=datetime.now(UTC), id="tick")
    sched.start()
    log.info("predictor: serving forecasts on http://%s:%d/metrics every %g s", host, port, interval_s)
    try:
        stop.wait()
    finally:
        sched.shutdown(wait=True)
        http.close()


def prepare_process(pc: PredictorConfig) -> None:
    """What the daemon does once, after loading its models and before its first tick (bench/scale.py does the same,
    so it times the tick the daemon runs): torch's threads from `predictor.torch_threads`, and the objects loaded so
    far (torch, the model, the libraries: a few hundred thousand) moved out of the garbage collector's sight with
    `gc.freeze()`, since a tick over a large fleet builds tens of thousands of samples and every full collection it
    triggers would otherwise walk all of them again (measured: a third of a 10,000-series tick)."""
    import gc

    if "torch" in sys.modules:  # the LSTM loaded (a baseline-only predictor never imports torch)
        from infercast.predictors.lstm import set_threads

        set_threads(pc.torch_threads)
    gc.freeze()


def run(args: argparse.Namespace) -> int:
    from infercast.clock import WallClock
    from infercast.predictors.publish import exposition
    from infercast.predictors.service import PredictorLoop
    from infercast.predictors.shard import Shard, ShardedStore
    from infercast.store.prometheus import PrometheusStore

    cfg = load_config(args.config)
    try:
        shard = Shard.from_env(args.shard)
    except ValueError as e:
        raise ConfigError(f"--shard: {e}") from None
    url = args.prometheus or cfg.predictor.prometheus_url
    if not url:
        raise ConfigError(f"{args.config}: predictor.prometheus_url is not set (or pass --prometheus URL)")
    pc = cfg.predictor
    store = PrometheusStore(url, timeout_seconds=max(1.0, min(10.0, pc.forecast_interval_seconds / 2)))
    if shard.count > 1:
        log.info("predictor: shard %s: forecasting the (pool, version) series hashmod assigns to it", shard)
        store = ShardedStore(store, shard)
    loop = PredictorLoop.from_config(cfg, kv_source=getattr(args, "kv_source", "auto"))
    prepare_process(pc)
    clock = WallClock()
    if args.once:
        sys.stdout.write(exposition(loop.tick(clock.now(), store), pc.legacy_forecast_labels))
        return 0
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    serve(loop, store, clock, args.listen or pc.listen, pc.forecast_interval_seconds, stop, pc.legacy_forecast_labels)
    return 0
