"""Test-only helpers: loopback HTTP targets with scripted misbehaviour, a fake pynvml module, a fake twin fleet."""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from infercast.exporters.router import RouterRecorder

ENGINES = Path(__file__).resolve().parent.parent / "data" / "engines"


def payload(name: str) -> str:
    return (ENGINES / name).read_text(encoding="utf-8")


@dataclass
class Route:
    """What one path answers: a body (str or callable), or a behaviour."""

    body: str | Callable[[], str] = ""
    status: int = 200
    delay: float = 0.0  # seconds before answering
    dribble: float = 0.0  # seconds between body bytes
    location: str | None = None
    huge_bytes: int = 0  # stream this many bytes of valid-looking text


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default backlog of 5 drops concurrent connects (a 1 s SYN retry)


class FixtureServer:
    """A loopback HTTP server whose paths are Routes (test-only)."""

    def __init__(self, routes: dict[str, Route] | None = None) -> None:
        self.routes: dict[str, Route] = dict(routes or {})
        self.hits: dict[str, int] = {}
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                outer.hits[self.path] = outer.hits.get(self.path, 0) + 1
                r = outer.routes.get(self.path) or outer.routes.get(self.path.split("?", 1)[0])
                if r is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                if r.delay:
                    time.sleep(r.delay)
                self.send_response(r.status)
                if r.location:
                    self.send_header("Location", r.location)
                try:
                    if r.huge_bytes:
                        self.end_headers()
                        line = b"# filler comment line to make the body large\n" * 1000
                        sent = 0
                        while sent < r.huge_bytes:
                            self.wfile.write(line)
                            sent += len(line)
                        return
                    body = (r.body() if callable(r.body) else r.body).encode()
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if r.dribble:
                        for i in range(len(body)):
                            self.wfile.write(body[i : i + 1])
                            self.wfile.flush()
                            time.sleep(r.dribble)
                    else:
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = _Server(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# --- a fake pynvml ---------------------------------------------------------------------------------------------
class _NVMLError(Exception):
    pass


class _NotSupported(_NVMLError):
    pass


class _Timeout(_NVMLError):
    pass


def fake_pynvml(gpus: int = 2, *, available: bool = True, ecc: bool = True, xids: list[tuple[int, int]] | None = None):
    """A module object with the pynvml calls the NVML collector makes (test-only); `xids` = [(gpu, xid)] events."""
    m = types.ModuleType("fake_pynvml")
    m.NVMLError = _NVMLError
    m.NVMLError_NotSupported = _NotSupported
    m.NVMLError_Timeout = _Timeout
    m.NVML_TEMPERATURE_GPU = 0
    m.NVML_PCIE_UTIL_TX_BYTES, m.NVML_PCIE_UTIL_RX_BYTES = 0, 1
    m.NVML_MEMORY_ERROR_TYPE_CORRECTED, m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    m.NVML_VOLATILE_ECC = 0
    m.nvmlEventTypeXidCriticalError = 8
    m.pending_xids = list(xids or [])
    m.init_calls = 0

    def nvmlInit():
        m.init_calls += 1
        if not available:
            raise _NVMLError("NVML Shared Library Not Found")

    m.nvmlInit = nvmlInit
    m.nvmlDeviceGetCount = lambda: gpus
    m.nvmlDeviceGetHandleByIndex = lambda i: ("h", i)
    m.nvmlDeviceGetUUID = lambda h: f"GPU-fake-{h[1]}"
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=(30 + h[1]) * 2**30, total=80 * 2**30, free=0)
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=87, memory=40)
    m.nvmlDeviceGetTemperature = lambda h, sensor: 71 + h[1]
    m.nvmlDeviceGetPowerUsage = lambda h: 412_500  # mW
    m.nvmlDeviceGetPcieThroughput = lambda h, c: 1000 if c == 0 else 2000  # KB/s

    def ecc_errors(h, etype, ctype):
        if not ecc:
            raise _NotSupported("Not Supported")
        return 3 if etype == 0 else 0

    m.nvmlDeviceGetTotalEccErrors = ecc_errors
    m.nvmlEventSetCreate = lambda: "events"
    m.nvmlDeviceRegisterEvents = lambda h, types_, s: None

    def wait(s, timeout_ms):
        if not m.pending_xids:
            raise _Timeout("Timeout")
        gpu, xid = m.pending_xids.pop(0)
        return types.SimpleNamespace(device=("h", gpu), eventData=xid)

    m.nvmlEventSetWait_v2 = wait
    return m


# --- a fake twin fleet (the lead's infercast.simulator.twin has the same surface) --------------------------------
@dataclass
class FakeNode:
    name: str
    pool: str
    version: str
    text: str
    up: bool = True

    def metrics_text(self) -> str:
        return self.text if self.up else ""


@dataclass
class FakeFleet:
    nodes: list[FakeNode]
    now: float = 0.0
    recorder: RouterRecorder = field(default_factory=RouterRecorder)
    advanced: list[float] = field(default_factory=list)

    def advance(self, seconds: float) -> None:
        self.advanced.append(seconds)
        self.now += seconds
