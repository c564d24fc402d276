"""Alertmanager's webhook into the actuator: alerts in, deduplicated `AlertEvent`s out, into a bounded inbox.

`WebhookReceiver(inbox).route()` is a route for `infercast.httpserve` (the daemon serves it beside `/metrics`),
so the front door is the shared one: a strict `Content-Length` up to `max_body_bytes` (413 above it, checked
before a byte is read), a read deadline, bounded connections, loopback by default, and -- when the daemon is given
a token -- `Authorization: Bearer` compared in constant time before the body is read (Alertmanager's
`http_config.authorization.credentials_file`).  Then:

- the body must be Alertmanager's webhook payload (`infercast.alertrules.webhook.validate`, plus string `fingerprint`,
  `startsAt`, `endsAt`): anything else is a 400 naming the first bad field, and nothing of it is kept;
- each alert becomes an `AlertEvent`; one whose fingerprint was seen with the same status within `dedup_seconds`
  is a duplicate and dropped (Alertmanager re-sends a whole group every `group_interval` and every firing alert
  every `repeat_interval`: 1,000 alerts a second of the same few problems are a few events, not an action storm);
  a change of status (firing -> resolved, or back) always passes;
- the inbox keeps at most `maxlen` events for the control loop, which takes them with `drain()`; when full the
  oldest goes (counted as dropped) and its fingerprint is forgotten, so Alertmanager's next re-send gets in.

The answer is 200 `{"accepted": n, "duplicates": n, "dropped": n}` (Alertmanager ignores the body; tests read it).

Bounds (docs/security.md), so that no sender can make the daemon hold more than a few tens of MiB:
- an alert has at most `MAX_LABELS` labels, names of at most `MAX_LABEL_NAME` characters and values of at most
  `MAX_LABEL_VALUE` (else a 400: labels identify an alert, a cut one would be another alert); its annotations are
  informational, so only the first `MAX_ANNOTATIONS` (by name) are kept, each cut to `MAX_ANNOTATION_VALUE`;
  a fingerprint is at most `MAX_FINGERPRINT` characters.  One event is then at most about 46 KiB, and the inbox
  (at most `inbox_size` <= 10,000 events) at most `inbox_size` x 46 KiB;
- the dedup remembers at most `MAX_FINGERPRINTS` fingerprints, the least recently seen forgotten first;
- `AlertBook` is what the control loop keeps of the alerts it was given: only pools of the fleet file, at most
  `MAX_FIRING` firing alerts (least recently noted forgotten first), each until it is resolved, until its `endsAt`
  (when Alertmanager sends a real time) or `alert_ttl_seconds` after it was last noted, whichever comes first:
  an alert that stops being re-sent stops driving the loop.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

from infercast.alertrules.webhook import validate
from infercast.httpserve import HttpError, Request, Response, Route

PATH = "/api/v1/alerts"
MAX_BODY_BYTES = 4 * 1024 * 1024
INBOX_SIZE = 1000
DEDUP_SECONDS = 300.0
MAX_FINGERPRINTS = 10_000  # how many alerts the dedup remembers (the least recently seen are forgotten)
MAX_LABELS = 32
MAX_LABEL_NAME = 128
MAX_LABEL_VALUE = 1024
MAX_ANNOTATIONS = 8
MAX_ANNOTATION_VALUE = 1024
MAX_FINGERPRINT = 128
MAX_FIRING = 1000  # firing alerts the control loop keeps (AlertBook), the least recently noted forgotten first
ALERT_TTL_SECONDS = 900.0  # a firing alert not re-sent for this long is over (3x the actuator route's repeat)


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
    expires_at: float | None = None  # `endsAt` as a Unix time when the sender gave a real one; None: the TTL's

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


def _unix_time(text: str, where: str) -> float | None:
    """An RFC 3339 time as a Unix time; None for Alertmanager's zero time (`0001-01-01T00:00:00Z`: no end known)."""
    if not text or text.startswith("0001-01-01"):
        return None
    try:
        t = datetime.fromisoformat(text[:64].replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{where} is not an RFC 3339 time: {text[:40]!r}") from None
    if t.tzinfo is None:
        raise ValueError(f"{where} has no time zone: {text[:40]!r}")
    return t.timestamp()


def _bounded_labels(labels: Mapping[str, str], where: str) -> dict[str, str]:
    if len(labels) > MAX_LABELS:
        raise ValueError(f"{where}: at most {MAX_LABELS} labels, got {len(labels)}")
    for k, v in labels.items():
        if len(k) > MAX_LABEL_NAME:
            raise ValueError(f"{where}: a label name is over {MAX_LABEL_NAME} characters: {k[:40]!r}...")
        if len(v) > MAX_LABEL_VALUE:
            raise ValueError(f"{where}.{k[:40]}: value over {MAX_LABEL_VALUE} characters ({len(v)})")
    return dict(labels)


def _kept_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    kept = sorted(annotations.items())[:MAX_ANNOTATIONS]
    return {k[:MAX_LABEL_NAME]: v[:MAX_ANNOTATION_VALUE] for k, v in kept}


def events_from(payload: dict[str, Any], received_at: float) -> list[AlertEvent]:
    """The events of a validated payload; ValueError naming the first field that is not what Alertmanager sends."""
    out = []
    for i, a in enumerate(payload.get("alerts", [])):
        for key in ("fingerprint", "startsAt", "endsAt", "generatorURL"):
            if key in a and not isinstance(a[key], str):
                raise ValueError(f"alerts[{i}].{key} must be a string")
        if len(a.get("fingerprint", "")) > MAX_FINGERPRINT:
            raise ValueError(f"alerts[{i}].fingerprint: over {MAX_FINGERPRINT} characters")
        labels = _bounded_labels(a["labels"], f"alerts[{i}].labels")
        ends = _unix_time(a.get("endsAt", ""), f"alerts[{i}].endsAt")
        status = a.get("status") or payload.get("status") or "firing"
        if status not in ("firing", "resolved"):
            raise ValueError(f"alerts[{i}].status must be 'firing' or 'resolved', got {status!r}"[:200])
        out.append(
            AlertEvent(
                fingerprint=a.get("fingerprint") or fingerprint_of(labels),
                status=status,
                alertname=labels.get("alertname", ""),
                labels=MappingProxyType(labels),
                annotations=MappingProxyType(_kept_annotations(a.get("annotations") or {})),
                starts_at=a.get("startsAt", "")[:64],
                ends_at=a.get("endsAt", "")[:64],
                received_at=received_at,
                expires_at=ends,
            )
        )
    return out


class AlertBook:
    """The firing alerts the control loop acts on, bounded and expiring (what `ControlLoop.alerting` is).

    `note(events, now)` first forgets what has expired by `now`, then takes the events in order: a firing alert
    about a pool of the fleet file is kept until `min(its endsAt, now + ttl)` (a re-send renews it), a resolved one
    is forgotten; alerts about other pools (or none) are ignored and counted (`ignored`): a forged `pool` label
    cannot grow the book.  At most `max_alerts` are kept; beyond that the least recently noted goes (`evicted`).
    Not thread-safe: the control loop's single thread owns it."""

    def __init__(
        self,
        pools: Iterable[str] | None = None,
        *,
        ttl_seconds: float = ALERT_TTL_SECONDS,
        max_alerts: int = MAX_FIRING,
    ) -> None:
        self.pools = frozenset(pools) if pools is not None else None
        self.ttl = ttl_seconds
        self.max_alerts = max_alerts
        self._firing: OrderedDict[str, tuple[str, float]] = OrderedDict()  # fingerprint -> (pool, expires at)
        self.ignored = 0
        self.evicted = 0
        self.expired = 0

    def note(self, events: Iterable[Any], now: float) -> None:
        self.expire(now)
        for ev in events:
            pool = getattr(ev, "pool", None)
            if not pool or (self.pools is not None and pool not in self.pools):
                self.ignored += 1
                continue
            if ev.status != "firing":
                self._firing.pop(ev.fingerprint, None)
                continue
            ends = getattr(ev, "expires_at", None)
            until = min(now + self.ttl, ends if ends is not None else math.inf)
            if until <= now:  # it said it ended already
                self._firing.pop(ev.fingerprint, None)
                continue
            self._firing[ev.fingerprint] = (pool, until)
            self._firing.move_to_end(ev.fingerprint)
            while len(self._firing) > self.max_alerts:
                self._firing.popitem(last=False)
                self.evicted += 1

    def expire(self, now: float) -> None:
        gone = [fp for fp, (_, until) in self._firing.items() if until <= now]
        for fp in gone:
            del self._firing[fp]
        self.expired += len(gone)

    def firing(self, pool: str) -> bool:
        """Whether an alert about `pool` is firing (as of the last `note`)."""
        return any(p == pool for p, _ in self._firing.values())

    def firing_pools(self) -> set[str]:
        return {p for p, _ in self._firing.values()}

    def __len__(self) -> int:
        return len(self._firing)


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
        return Route("POST", self.path, self._post, mutates=True, max_body_bytes=self.max_body_bytes, json_body=True)

    def _post(self, req: Request) -> Response:
        try:
            events = events_from(validate(req.json()), self.clock())
        except ValueError as e:
            raise HttpError(400, str(e)) from None
        offer = self.inbox.offer(events)
        if self.on_offer is not None:
            self.on_offer(offer)
        return Response.json({"accepted": offer.accepted, "duplicates": offer.duplicates, "dropped": offer.dropped})


def alert_book(cfg: Any) -> AlertBook:
    """The book for a fleet file (`infercast.config.FleetConfig`): its pools, the context split's two pools, and
    `actuator.webhook.alert_ttl_seconds`."""
    pools = set(cfg.pools)
    cp = cfg.protections.context_pools
    if cp is not None:
        pools |= {cp.short_pool, cp.long_pool}
    return AlertBook(pools, ttl_seconds=cfg.actuator.webhook.alert_ttl_seconds)
