"""The twin's surfaces: what a real fleet shows the outside world.

- Each node renders vLLM 0.34-style `/metrics` text (`infercast.simulator.twin.exposition`).
- The router has an admin HTTP API, as a real router would: `GET /pools`, `POST /pools/<pool>/weight`
  (`{"weight": 0.5}`), `POST /pools/<pool>/breaker` (`{"seconds": 0.4}`), `POST /pools/<pool>/prewarm`.
- The router also serves the generic router admin API (docs/router-admin-api.md: `GET /v1/fleet`,
  `POST /v1/actions`, `GET /v1/actions/<key>`) through `infercast.simulator.twin.admin.TwinAdmin`, so the
  actuator's HTTP backend drives the twin as it would any router.
- `TwinServer` serves both over loopback HTTP (through `infercast.httpserve`): `/nodes/<name>/metrics` and the
  admin APIs, guarding the fleet with one lock so a background thread can advance it.
"""

from __future__ import annotations

import threading

from infercast.actuators.backends.router_api import RouterAdminApi
from infercast.httpserve import FROM_ENV, HttpError, HttpService, Request, Response, Route, finite
from infercast.simulator.twin.admin import TwinAdmin
from infercast.simulator.twin.exposition import node_metrics_text

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
    (docs/actuator.md): `python -c 'from infercast.simulator.twin.surfaces import serve_main; serve_main()' --scenario
    flash-sale --listen 127.0.0.1:9410 [--speed 1]`.  POSTs need `INFERCAST_HTTP_TOKEN` as a bearer token when it
    is set.  (Not `python -m`: the twin package imports this module, so runpy would run a second copy of it.)"""
    import argparse
    import signal
    import sys
    import time

    from infercast.config import load_config, parse_listen, resolve_scenario
    from infercast.simulator.twin.fleet import build_fleet

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
