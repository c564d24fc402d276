"""Alertmanager's webhook into the actuator: alerts in, deduplicated `AlertEvent`s out, into a bounded inbox.

`WebhookReceiver(inbox).route()` is a route for `infercast.httpserve` (the daemon serves it beside `/metrics`),
so the front door is the shared one: a strict `Content-Length` up to `max_body_bytes` (413 above it, checked
before a byte is read), a read deadline, bounded connections, loopback by default, and -- when the daemon is given
a token -- `Authorization: Bearer` compared in constant time before the body is read (Alertmanager's
`http_config.authorization.credentials_file`).  Then:

- the body must be Alertmanager's webhook payload (`alertrules.webhook.validate`, plus string `fingerprint`,
  `startsAt`, `endsAt`): anything else is a 400 naming the first bad field, and nothing of it is kept;
- each alert becomes an `AlertEvent`; one whose fingerprint was seen with the same status within `dedup_seconds`
  is a duplicate and dropped (Alertmanager re-sends a whole group every `group_interval` and every firing alert
  every `repeat_interval`: 1,000 alerts a second of the same few problems are a few events, not an action storm);
  a change of status (firing -> resolved, or back) always passes;
- the inbox keeps at most `maxlen` events for the control loop, which takes them with `drain()`; when full the
  oldest goes (counted as dropped) and its fingerprint is forgotten, so Alertmanager's next re-send gets in.

The answer is 200 `{"accepted": n, "duplicates": n, "dropped": n}` (Alertmanager ignores the body; tests read it).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from alertrules.webhook import validate
from infercast.httpserve import HttpError, Request, Response, Route

PATH = "/api/v1/alerts"
MAX_BODY_BYTES = 4 * 1024 * 1024
INBOX_SIZE = 1000
DEDUP_SECONDS = 300.0
MAX_FINGERPRINTS = 10_000  # how many alerts the dedup remembers (the least recently seen are forgotten)


@dataclass(frozen=True)
class AlertEvent:
    fingerprint: str
    status: Literal["firing", "resolved"]
    alertname: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    starts_at: str = ""
    ends_at: str = ""
    received_at: float = 0.0

    @property
    def pool(self) -> str | None:
        return self.labels.get("pool")

    @property
    def version(self) -> str | None:
        return self.labels.get("version")


@dataclass(frozen=True)
class Offer:
    """What became of the alerts of one notification."""

    accepted: int = 0
    duplicates: int = 0
    dropped: int = 0


class Inbox:
    """A bounded, thread-safe queue of deduplicated alert events; the control loop `drain()`s it each tick."""

    def __init__(
        self,
        maxlen: int = INBOX_SIZE,
        dedup_seconds: float = DEDUP_SECONDS,
        *,
        max_fingerprints: int = MAX_FINGERPRINTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.maxlen = maxlen
        self.dedup_seconds = dedup_seconds
        self.max_fingerprints = max_fingerprints
        self.clock = clock
        self._events: deque[AlertEvent] = deque()
        self._seen: OrderedDict[str, tuple[str, float]] = OrderedDict()  # fingerprint -> (status, when)
        self._lock = threading.Lock()

    def offer(self, events: list[AlertEvent]) -> Offer:
        accepted = duplicates = dropped = 0
        with self._lock:
            now = self.clock()
            for ev in events:
                last = self._seen.get(ev.fingerprint)
                if last is not None and last[0] == ev.status and now - last[1] < self.dedup_seconds:
                    duplicates += 1
                    self._seen.move_to_end(ev.fingerprint)
                    continue
                self._seen[ev.fingerprint] = (ev.status, now)
                self._seen.move_to_end(ev.fingerprint)
                while len(self._seen) > self.max_fingerprints:
                    self._seen.popitem(last=False)
                if len(self._events) >= self.maxlen:
                    old = self._events.popleft()
                    dropped += 1
                    if self._seen.get(old.fingerprint, ("",))[0] == old.status:
                        del self._seen[old.fingerprint]  # its re-send must get in
                self._events.append(ev)
                accepted += 1
        return Offer(accepted, duplicates, dropped)

    def drain(self) -> list[AlertEvent]:
        """Every event waiting, oldest first; the inbox is empty afterwards."""
        with self._lock:
            out = list(self._events)
            self._events.clear()
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)


def fingerprint_of(labels: Mapping[str, str]) -> str:
    """A stable fingerprint from an alert's labels, for senders that give none (Alertmanager always does)."""
    text = "\x00".join(f"{k}\x01{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def events_from(payload: dict[str, Any], received_at: float) -> list[AlertEvent]:
    """The events of a validated payload; ValueError naming the first field that is not what Alertmanager sends."""
    out = []
    for i, a in enumerate(payload.get("alerts", [])):
        for key in ("fingerprint", "startsAt", "endsAt", "generatorURL"):
            if key in a and not isinstance(a[key], str):
                raise ValueError(f"alerts[{i}].{key} must be a string")
        labels = dict(a["labels"])
        status = a.get("status") or payload.get("status") or "firing"
        if status not in ("firing", "resolved"):
            raise ValueError(f"alerts[{i}].status must be 'firing' or 'resolved', got {status!r}"[:200])
        out.append(
            AlertEvent(
                fingerprint=a.get("fingerprint") or fingerprint_of(labels),
                status=status,
                alertname=labels.get("alertname", ""),
                labels=MappingProxyType(labels),
                annotations=MappingProxyType(dict(a.get("annotations") or {})),
                starts_at=a.get("startsAt", ""),
                ends_at=a.get("endsAt", ""),
                received_at=received_at,
            )
        )
    return out


class WebhookReceiver:
    """The route that feeds `inbox`; `on_offer(offer)` is called after each notification (metrics, waking the
    loop)."""

    def __init__(
        self,
        inbox: Inbox,
        path: str = PATH,
        max_body_bytes: int = MAX_BODY_BYTES,
        on_offer: Callable[[Offer], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.inbox = inbox
        self.path = path
        self.max_body_bytes = max_body_bytes
        self.on_offer = on_offer
        self.clock = clock

    def route(self) -> Route:
        return Route("POST", self.path, self._post, mutates=True, max_body_bytes=self.max_body_bytes)

    def _post(self, req: Request) -> Response:
        try:
            events = events_from(validate(req.json()), self.clock())
        except ValueError as e:
            raise HttpError(400, str(e)) from None
        offer = self.inbox.offer(events)
        if self.on_offer is not None:
            self.on_offer(offer)
        return Response.json({"accepted": offer.accepted, "duplicates": offer.duplicates, "dropped": offer.dropped})
