"""A small webhook receiver for Alertmanager: it prints one JSON line per notification and keeps the latest in memory.

It is the `alert-log` service of docker-compose (the pager until you wire a real one), the receiver of the
end-to-end test, and a handy stand-in for the actuator's webhook while that lands:
`python -m infercast.alertrules.webhook --listen 127.0.0.1:9095`.

It serves through `infercast.httpserve` (strict Content-Length up to 4 MiB, a read deadline, bounded connections,
JSON errors; with `INFERCAST_HTTP_TOKEN` set, POSTs need it as a bearer token -- Alertmanager's
`http_config.authorization`).  A body is validated as Alertmanager's webhook payload *before* anything is kept
(`validate`): a malformed one is a 400 with the reason and nothing stored, so a sender's retry cannot duplicate a
half-accepted notification.  Only the last `max_kept` notifications stay in memory (`dropped` counts the others).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, TextIO

from infercast.config import parse_listen
from infercast.httpserve import FROM_ENV, HttpError, HttpService, Request, Response, Route

MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_KEPT = 1000
MAX_ALERTS = 1000  # per notification; Alertmanager's max_alerts is unlimited by default, its groups are not this big


@dataclass
class Notification:
    path: str
    received_at: float
    payload: dict[str, Any]

    @property
    def alertnames(self) -> list[str]:
        return [a.get("labels", {}).get("alertname", "") for a in self.payload.get("alerts", [])]


def _strings(value: Any, where: str) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"{where} must be an object of strings")


def validate(payload: Any) -> dict[str, Any]:
    """`payload` when it has the shape of Alertmanager's webhook body (the fields read here); ValueError naming the
    first bad field otherwise."""
    if not isinstance(payload, dict):
        raise ValueError("expected a JSON object")
    for key in ("receiver", "status", "groupKey", "externalURL"):
        if key in payload and not isinstance(payload[key], str):
            raise ValueError(f"{key} must be a string")
    for key in ("groupLabels", "commonLabels", "commonAnnotations"):
        if key in payload:
            _strings(payload[key], key)
    alerts = payload.get("alerts", [])
    if not isinstance(alerts, list):
        raise ValueError("alerts must be a list")
    if len(alerts) > MAX_ALERTS:
        raise ValueError(f"alerts: at most {MAX_ALERTS} per notification, got {len(alerts)}")
    for i, a in enumerate(alerts):
        if not isinstance(a, dict):
            raise ValueError(f"alerts[{i}] must be an object")
        _strings(a.get("labels"), f"alerts[{i}].labels")
        if "annotations" in a:
            _strings(a["annotations"], f"alerts[{i}].annotations")
        if "status" in a and a["status"] not in ("firing", "resolved"):
            raise ValueError(f"alerts[{i}].status must be 'firing' or 'resolved', got {a['status']!r}"[:200])
    return payload


@dataclass
class WebhookRecorder:
    """Records POSTed Alertmanager notifications (the last `max_kept`); `serve()` runs it on a background thread."""

    host: str = "127.0.0.1"
    port: int = 0
    out: TextIO | None = None
    max_kept: int = MAX_KEPT
    token: str | object | None = FROM_ENV
    notifications: deque[Notification] = field(default_factory=deque)
    dropped: int = 0
    _service: HttpService | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.notifications = deque(self.notifications, maxlen=self.max_kept)

    def serve(self) -> WebhookRecorder:
        route = Route("POST", "*", self._post, mutates=True, max_body_bytes=MAX_BODY_BYTES)
        self._service = HttpService([route], self.host, self.port, name="webhook", token=self.token).start()
        self.port = self._service.port
        return self

    def _post(self, req: Request) -> Response:
        try:
            payload = validate(req.json())
        except ValueError as e:
            raise HttpError(400, str(e)) from None
        self.record(Notification(req.path, time.time(), payload))
        return Response(200)

    def record(self, n: Notification) -> None:
        with self._lock:
            if len(self.notifications) == self.max_kept:
                self.dropped += 1
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

    def first(
        self, alertname: str, receiver: str | None = None, labels: dict[str, str] | None = None
    ) -> Notification | None:
        """The first notification kept carrying a firing `alertname` (for `receiver`, and with these `labels`, if
        given: a page for another pool is not this pool's page)."""
        want = {**(labels or {}), "alertname": alertname}
        for n in self.received():
            if receiver is not None and n.payload.get("receiver") != receiver:
                continue
            for a in n.payload.get("alerts", []):
                have = a.get("labels", {})
                if a.get("status") == "firing" and all(have.get(k) == v for k, v in want.items()):
                    return n
        return None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        if self._service is not None:
            self._service.close()
            self._service = None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infercast.alertrules.webhook", description=__doc__.splitlines()[0])
    p.add_argument("--listen", default="127.0.0.1:9095", help="HOST:PORT (default 127.0.0.1:9095)")
    args = p.parse_args(argv)
    try:
        host, port = parse_listen(args.listen)
    except ValueError:
        p.error(f"--listen must be HOST:PORT, got {args.listen!r}")
    rec = WebhookRecorder(host, port, out=sys.stdout).serve()
    print(f"alert webhook listening on {rec.url}", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        rec.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
