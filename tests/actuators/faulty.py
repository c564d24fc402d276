"""Test-only: a loopback HTTP server that answers from a script (status, body, delay, reset, dribble, pass-through).

Each request takes the next step of the script (the last one repeats).  A step may pass the request on to a real
handler (`forward`), e.g. the router admin API over the twin, and then misbehave with the answer (lose it after the
action was applied).  Every request is recorded (method, path, headers, body) so a test can say what was sent.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Step:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    delay: float = 0.0  # seconds before answering
    reset: bool = False  # drop the connection (RST) instead of answering
    dribble: float = 0.0  # seconds between body bytes
    forward: bool = False  # let the real handler answer (and apply), then apply this step's misbehaviour
    lose_answer: bool = False  # with forward: apply, then answer nothing until the client gave up (delay) and reset


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FaultyServer:
    script: list[Step]
    handler: Callable[[str, str, dict[str, str], bytes], tuple[int, bytes]] | None = None
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        outer = self
        lock = threading.Lock()

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                with lock:
                    outer.seen.append(Seen(self.command, self.path, headers, body))
                    step = outer.script[min(len(outer.seen) - 1, len(outer.script) - 1)]
                status, payload = step.status, step.body
                if step.forward:
                    assert outer.handler is not None
                    status, payload = outer.handler(self.command, self.path, headers, body)
                if step.delay:
                    time.sleep(step.delay)
                if step.reset or step.lose_answer:
                    # SO_LINGER 0: close() sends RST, the client sees "connection reset"
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    return
                self.send_response(status)
                self.send_header("Content-Type", step.content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if step.dribble:
                    for i in range(len(payload)):
                        self.wfile.write(payload[i : i + 1])
                        self.wfile.flush()
                        time.sleep(step.dribble)
                else:
                    self.wfile.write(payload)

            do_GET = do_POST = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
