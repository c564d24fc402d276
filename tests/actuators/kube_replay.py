"""Test-only: a loopback Kubernetes API that replays recorded answers (tests/data/k8s/) in a scripted order.

No cluster runs here.  Each `Exchange` is one request the test expects (method + path) and the recorded answer to
give; a request that is not the next expected one is answered 400 with what was expected (so the test fails
saying so).  Every request is kept (method, path, headers, JSON body) for the test to check what the official
client sent.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

K8S = Path(__file__).resolve().parents[1] / "data" / "k8s"
DEPLOYMENTS = "/apis/apps/v1/namespaces/infer/deployments"
HPAS = "/apis/autoscaling/v2/namespaces/infer/horizontalpodautoscalers"
SCALEDOBJECTS = "/apis/keda.sh/v1alpha1/namespaces/infer/scaledobjects"
HTTPROUTES = "/apis/gateway.networking.k8s.io/v1/namespaces/infer/httproutes"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/infer/leases"


def recorded(name: str) -> dict[str, Any]:
    return json.loads((K8S / name).read_text())


@dataclass
class Exchange:
    method: str
    path: str
    status: int
    answer: str  # a file in tests/data/k8s/


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    query: str = ""  # the query string, e.g. dryRun=All


@dataclass
class KubeReplay:
    script: list[Exchange]
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        outer = self
        lock = threading.Lock()

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                path, _, query = self.path.partition("?")
                with lock:
                    i = len(outer.requests)
                    outer.requests.append(
                        Request(self.command, path, {k.lower(): v for k, v in self.headers.items()}, _json(raw), query)
                    )
                    want = outer.script[i] if i < len(outer.script) else None
                if want is None or (want.method, want.path) != (self.command, path):
                    expected = f"{want.method} {want.path}" if want else "no more requests"
                    body = json.dumps({"kind": "Status", "message": f"replay expected {expected}", "code": 400})
                    status = 400
                else:
                    body, status = (K8S / want.answer).read_text(), want.status
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def then(self, *exchanges: Exchange) -> None:
        self.script.extend(exchanges)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


def merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch, as the API server applies the backends' merge patches to a custom object."""
    out = copy.deepcopy(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merged(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out
