"""A small webhook receiver for Alertmanager: it prints one JSON line per notification and keeps them in memory.

It is the `alert-log` service of docker-compose (the pager until you wire a real one), the receiver of the
end-to-end test, and a handy stand-in for the actuator's webhook while that lands:
`python -m alertrules.webhook --listen 127.0.0.1:9095`.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass
class Notification:
    path: str
    received_at: float
    payload: dict[str, Any]

    @property
    def alertnames(self) -> list[str]:
        return [a.get("labels", {}).get("alertname", "") for a in self.payload.get("alerts", [])]


@dataclass
class WebhookRecorder:
    """Records every POSTed Alertmanager notification; `serve()` runs it on a background thread."""

    host: str = "127.0.0.1"
    port: int = 0
    out: TextIO | None = None
    notifications: list[Notification] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def serve(self) -> WebhookRecorder:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY_BYTES:
                    self.send_error(413, "body too large")
                    return
                try:
                    payload = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError as e:
                    self.send_error(400, f"not JSON: {e.msg}")
                    return
                if not isinstance(payload, dict):
                    self.send_error(400, "expected a JSON object")
                    return
                recorder.record(Notification(self.path, time.time(), payload))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:  # quiet: the JSON lines are the log
                pass

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="webhook", daemon=True).start()
        return self

    def record(self, n: Notification) -> None:
        with self._lock:
            self.notifications.append(n)
        if self.out is not None:
            summary = {
                "path": n.path,
                "receiver": n.payload.get("receiver"),
                "status": n.payload.get("status"),
                "alerts": [
                    {
                        "status": a.get("status"),
                        **a.get("labels", {}),
                        "summary": a.get("annotations", {}).get("summary"),
                    }
                    for a in n.payload.get("alerts", [])
                ],
            }
            print(json.dumps(summary, sort_keys=True), file=self.out, flush=True)

    def received(self) -> list[Notification]:
        with self._lock:
            return list(self.notifications)

    def first(self, alertname: str, receiver: str | None = None) -> Notification | None:
        """The first notification carrying a firing `alertname` (for `receiver`, if given)."""
        for n in self.received():
            if receiver is not None and n.payload.get("receiver") != receiver:
                continue
            for a in n.payload.get("alerts", []):
                if a.get("status") == "firing" and a.get("labels", {}).get("alertname") == alertname:
                    return n
        return None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m alertrules.webhook", description=__doc__.splitlines()[0])
    p.add_argument("--listen", default="127.0.0.1:9095", help="HOST:PORT (default 127.0.0.1:9095)")
    args = p.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        p.error(f"--listen must be HOST:PORT, got {args.listen!r}")
    rec = WebhookRecorder(host, int(port), out=sys.stdout).serve()
    print(f"alert webhook listening on {rec.url}", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        rec.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
