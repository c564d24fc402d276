"""The twin's surfaces: what a real fleet shows the outside world.

- Each node renders vLLM 0.34-style `/metrics` text (single-process shape: labels `model_name`, `engine`; real
  family names, HELP and TYPE as in `tests/data/engines/`), plus the infercast engine extension v1
  (`docs/engine-extension.md`): the families real engines lack (fragmentation, memory efficiency, max batch,
  block-allocation failures, GPU memory).  A node that is down renders nothing (its endpoint does not answer).
- The router has an admin HTTP API, as a real router would: `GET /pools`, `POST /pools/<pool>/weight`
  (`{"weight": 0.5}`), `POST /pools/<pool>/breaker` (`{"seconds": 0.4}`), `POST /pools/<pool>/prewarm`.
- The router also serves the generic router admin API (docs/router-admin-api.md: `GET /v1/fleet`,
  `POST /v1/actions`, `GET /v1/actions/<key>`) through `infercast.actuators.backends.twin.TwinAdmin`, so the actuator's
  HTTP backend drives the twin as it would any router.
- `TwinServer` serves both over loopback HTTP (through `infercast.httpserve`): `/nodes/<name>/metrics` and the
  admin APIs, guarding the fleet with one lock so a background thread can advance it.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from infercast.actuators.backends.router_api import RouterAdminApi
from infercast.actuators.backends.twin import TwinAdmin
from infercast.catalog import (
    ENGINE_EXTENSION_INFO,
    ENGINE_EXTENSION_VERSION,
    ENGINE_GPU_MEMORY_TOTAL_BYTES,
    ENGINE_GPU_MEMORY_USED_BYTES,
    ENGINE_KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    ENGINE_KV_CACHE_FRAGMENTATION_RATIO,
    ENGINE_MAX_NUM_SEQS,
    ENGINE_MEMORY_EFFICIENCY_RATIO,
    spec,
)
from infercast.httpserve import FROM_ENV, HttpError, HttpService, Request, Response, Route, finite

# vLLM 0.34's time-to-first-token buckets (vllm/v1/metrics/loggers.py)
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip


def _num(v: float) -> str:
    if isinstance(v, float) and math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _family(lines: list[str], name: str, kind: str, help_text: str, samples: list[tuple[str, str, float]]) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    for sample, labels, value in samples:
        lines.append(f"{sample}{{{labels}}} {_num(value)}")


def node_metrics_text(node, t: float | None = None) -> str:
    """vLLM-style exposition of one node (empty when the node is down)."""
    if not node.up:
        return ""
    t = node.t_last if t is None else t
    base = f'engine="{node.engine_index}",model_name="{node.vcfg.model.name}"'
    out: list[str] = []
    _family(out, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
            [("vllm:num_requests_running", base, node.running)])  # fmt: skip
    _family(out, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
            [("vllm:num_requests_waiting", base, node.waiting)])  # fmt: skip
    _family(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
            [("vllm:kv_cache_usage_perc", base, round(node.kv_usage(), 6))])  # fmt: skip
    _family(out, "vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
            [("vllm:num_preemptions_total", base, node.preemptions_total)])  # fmt: skip
    _family(out, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
            [("vllm:prompt_tokens_total", base, node.prompt_tokens_total)])  # fmt: skip
    _family(out, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
            [("vllm:generation_tokens_total", base, math.floor(node.generation_tokens_total))])  # fmt: skip
    _family(out, "vllm:request_success_total", "counter", "Count of successfully processed requests.",
            [("vllm:request_success_total", f'{base},finished_reason="stop"', node.success_total)])  # fmt: skip
    bt = node.vcfg.block_size_tokens
    cache_labels = (
        f'block_size="{bt}",cache_dtype="auto",enable_prefix_caching="False",{base},'
        f'gpu_memory_utilization="{node.pcfg.memory_utilization}",kv_cache_size_tokens="{node.kv_capacity_tokens}",'
        f'num_gpu_blocks="{node.kv_capacity_tokens // bt}"'
    )
    _family(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig",
            [("vllm:cache_config_info", cache_labels, 1.0)])  # fmt: skip
    cum = np.cumsum(node.ttft_hist)
    samples = [
        ("vllm:time_to_first_token_seconds_bucket", f'{base},le="{_num(b)}"', float(c))
        for b, c in zip((*TTFT_BUCKETS, float("inf")), cum, strict=True)
    ]
    samples.append(("vllm:time_to_first_token_seconds_count", base, float(cum[-1])))
    samples.append(("vllm:time_to_first_token_seconds_sum", base, float(node.ttft_sum)))
    _family(out, "vllm:time_to_first_token_seconds", "histogram",
            "Histogram of time to first token in seconds.", samples)  # fmt: skip
    # --- infercast engine extension v1 ---------------------------------------------------------------------
    ext = [
        (ENGINE_KV_CACHE_FRAGMENTATION_RATIO, round(node.fragmentation(t), 6)),
        (ENGINE_MEMORY_EFFICIENCY_RATIO, round(node.memory_efficiency(t), 6)),
        (ENGINE_MAX_NUM_SEQS, node.max_batch),
        (ENGINE_KV_BLOCK_ALLOCATION_FAILURES_TOTAL, node.alloc_failures_total),
        (ENGINE_GPU_MEMORY_USED_BYTES, round(node.memory_usage() * node.physical_bytes)),
        (ENGINE_GPU_MEMORY_TOTAL_BYTES, node.physical_bytes),
    ]
    info = spec(ENGINE_EXTENSION_INFO)
    _family(out, info.name, "gauge", info.help, [(info.name, f'version="{ENGINE_EXTENSION_VERSION}"', 1.0)])
    for name, value in ext:
        m = spec(name)
        _family(out, name, m.kind.value, m.help, [(name, base, value)])
    return "\n".join(out) + "\n"


#: bounds of the admin API's numbers: finite and small enough that sums and products over pools stay finite
MAX_WEIGHT = 1e6
MAX_BREAKER_SECONDS = 86400.0


class TwinServer:
    """Serve a fleet's node metrics and router admin API on loopback; `lock` guards the fleet.

    Served through `infercast.httpserve`: strict Content-Length (64 KiB bodies), a read deadline, bounded
    connections, JSON errors; the admin POSTs change state, so they need the bearer token when
    `INFERCAST_HTTP_TOKEN` (or `token`) is set.  Weights and thresholds must be finite JSON numbers (`Infinity`,
    `1e999` and the string `"1e999"` are refused before the router sees them).
    """

    def __init__(
        self,
        fleet,
        host: str = "127.0.0.1",
        port: int = 0,
        lock: threading.Lock | None = None,
        *,
        token: str | object | None = FROM_ENV,
    ) -> None:
        self.fleet = fleet
        self.lock = lock or threading.Lock()
        self.admin_api = RouterAdminApi(TwinAdmin(fleet), self.lock)
        routes = [
            Route("GET", "/pools", self._pools),
            Route("GET", "/nodes", self._nodes),
            Route("GET", "/nodes/{node}/metrics", self._node_metrics),
            Route("POST", "/pools/{pool}/{action}", self._admin, mutates=True),
            *self.admin_api.routes(),
        ]
        self.http = HttpService(routes, host, port, name="twin", token=token)
        self.server_address = (host, self.http.port)

    @property
    def url(self) -> str:
        return self.http.url

    def start(self) -> TwinServer:
        self.http.start()
        return self

    def stop(self) -> None:
        self.http.close()

    # --- routes --------------------------------------------------------------------------------------------------
    def _pools(self, _: Request) -> Response:
        with self.lock:
            r = self.fleet.router
            body = {
                p: {
                    "version": r.version_of[p],
                    "weight": r.weights[p],
                    "breaker_threshold_seconds": r.breaker_threshold[p],
                    "enabled": r.enabled[p],
                    "nodes_up": sum(n.up for n in r.pool_nodes[p]),
                    "nodes": len(r.pool_nodes[p]),
                }
                for p in r.pools
            }
        return Response.json(body)

    def _nodes(self, _: Request) -> Response:
        with self.lock:
            body = [{"name": n.name, "pool": n.pool, "version": n.version, "up": n.up} for n in self.fleet.nodes]
        return Response.json(body)

    def _node_metrics(self, req: Request) -> Response:
        name = req.params["node"]
        with self.lock:
            node = next((n for n in self.fleet.nodes if n.name == name), None)
            text = node_metrics_text(node) if node is not None else None
        if node is None:
            raise HttpError(404, f"no node {name[:100]!r}")
        if not text:
            raise HttpError(503, f"node {name} is down")
        return Response.text(text, content_type="text/plain; version=0.0.4; charset=utf-8")

    def _admin(self, req: Request) -> Response:
        pool, action = req.params["pool"], req.params["action"]
        if action not in ("weight", "breaker", "prewarm"):
            raise HttpError(404, f"unknown action {action[:50]!r}")
        body = req.json()
        if not isinstance(body, dict):
            raise HttpError(400, "expected a JSON object")
        try:
            if action == "weight":
                value = finite(body.get("weight"), "weight", minimum=0.0, maximum=MAX_WEIGHT)
            elif action == "breaker":
                value = finite(body.get("seconds"), "seconds", minimum=0.0, maximum=MAX_BREAKER_SECONDS)
        except ValueError as e:
            raise HttpError(400, str(e)) from None
        with self.lock:
            r = self.fleet.router
            if pool not in r.weights:
                raise HttpError(404, f"unknown pool {pool[:100]!r}")
            try:
                if action == "weight":
                    r.set_pool_weight(pool, value)
                elif action == "breaker":
                    r.set_breaker_threshold(pool, value)
                else:
                    started = r.prewarm_pool(pool, self.fleet.now)
                    return Response.json({"pool": pool, "nodes_started": started})
            except ValueError as e:
                raise HttpError(400, str(e)) from None
        return Response.json({"pool": pool, action: body})


def serve_main(argv: list[str] | None = None) -> int:
    """Serve a twin that advances in (scaled) real time, for running the actuator daemon against its admin API
    (docs/actuator.md): `python -c 'from infercast.twin.surfaces import serve_main; serve_main()' --scenario
    flash-sale --listen 127.0.0.1:9410 [--speed 1]`.  POSTs need `INFERCAST_HTTP_TOKEN` as a bearer token when it
    is set.  (Not `python -m`: the twin package imports this module, so runpy would run a second copy of it.)"""
    import argparse
    import signal
    import sys
    import time

    from infercast.config import load_config, parse_listen, resolve_scenario
    from infercast.twin.fleet import build_fleet

    p = argparse.ArgumentParser(prog="serve_main", description="serve the twin's metrics and admin APIs")
    p.add_argument("--scenario", default="flash-sale", help="a scenario name or fleet file with a scenario")
    p.add_argument("--listen", default="127.0.0.1:9410", help="HOST:PORT (default 127.0.0.1:9410)")
    p.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall second (default 1)")
    args = p.parse_args(argv)
    try:
        host, port = parse_listen(args.listen)
    except ValueError as e:
        p.error(f"--listen: {e}")
    if args.speed <= 0:
        p.error("--speed must be positive")
    fleet = build_fleet(load_config(resolve_scenario(args.scenario)))
    server = TwinServer(fleet, host, port).start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"twin {args.scenario} serving {server.url} (/v1/fleet, /v1/actions, /pools, /nodes)", file=sys.stderr)
    t0 = time.monotonic()
    while not stop.wait(fleet.dt / args.speed):
        target = (time.monotonic() - t0) * args.speed
        with server.lock:
            while fleet.now < min(target, fleet.traffic.duration_s):
                fleet.step()
    server.stop()
    return 0
