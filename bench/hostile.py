"""Hostile input at every listener and every parser (issue 24 item 8): crashes, hangs, memory growth, silent drops.

    nice -n 15 .venv/bin/python bench/hostile.py [--n 1200] [--seed 0] [--json FILE]

At least `--n` generated hostile payloads in all, shared out over these targets (each in this process, on loopback):

- `webhook`: the actuator's Alertmanager webhook (`POST /api/v1/alerts`, with its token): mutated notifications,
  arbitrary JSON (NaN, 1e400, deep nesting, huge strings), wrong content types, raw bytes on the socket;
- `ingest`: the exporter's `POST /ingest/router` (with its token): the same kinds, around a valid ingest body;
- `router_api`: the router admin API the twin serves (`POST /v1/actions`, with its token): mutated actions,
  hostile `Idempotency-Key` and `X-Fencing-Token` headers;
- `alert_log`: the alert log (`infercast.alertrules.webhook.WebhookRecorder`, `POST *`, with its token): mutated
  Alertmanager notifications, the same kinds as the webhook;
- `predictor_metrics`, `twin_pages`: the read-only listeners (the predictor's `/metrics` with forecasts in it; the
  twin's `/pools`, `/nodes`, `/nodes/{node}/metrics`), without a token: hostile paths (traversal, encodings, 8 KB
  names), query strings and headers, other methods with bodies, raw bytes on the socket;
- `file_backend`, `redis_backend`: what the backends read back from their stores, rewritten by someone else: the
  file backend's document (mutated YAML or JSON, garbage, hostile `infercast.applied` records and fencing tokens)
  and the Redis backend's keys (hostile hash fields, keys of the wrong type, forged records under an idempotency
  key; a real `redis-server` on a unix socket, skipped with a note when there is none), each read by `observe`,
  `fence`, an apply, and the daemon's read-back of a lost answer (`infercast.actuators.recovery.read_back`) and restart
  recovery (`resolve_in_flight`);
- `textparse`: the exporter's isolating text parser and each collector (vLLM, SGLang, TGI, TRT-LLM, dcgm) on
  mutated real pages;
- `config`: `infercast.config.load_config` on mutated fleet files (values, duplicate keys, YAML bombs, garbage);
- `traces`: `infercast.simulator.replay.traces.load_trace` on hostile Azure, Mooncake and ServeGen files;
- `actions`: `infercast.actuators.actions.parse_action` on hostile mappings.

What counts, per target:
- **crash**: a listener answering 5xx, dropping the connection, or failing its health check afterwards (`GET` of a
  read route, or a valid `POST` for the alert log, within 5 s); a parser raising anything but its documented error
  (ScrapeError, ConfigError, TraceError, ActionError; BackendError or ActionRefused for a backend, and nothing at
  all from the daemon's read-back and recovery, which must turn a store they cannot read into `unknown` or
  `unresolved`);
- **hang**: one payload taking more than 5 s;
- **memory growth**: this process's RSS after the target's payloads minus after a warm-up, in MiB (counted as one
  when over 64 MiB);
- **contained** (printed, not a failure): a backend's `apply` or `lookup` raising outside its contract on a
  store someone else wrote, which the daemon's own path caught and recorded (`failed` naming the error, or
  `unknown`); each is a backend bug to fix in the backend, listed with the error;
- **silent drop**: a refusal without a reason (a 4xx without an `error` text, a parser error without a message), or
  a family of the page that the isolating parser neither kept nor reported as dropped.

Payloads come from Hypothesis (seeded with `--seed`, so a run is repeatable) when it is installed, else from a
seeded `random.Random`; both through the same small drawing interface.  Exit status 1 unless every count is zero.
`tests/test_hostile.py` runs it with a small `--n`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import random
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import requests

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TOKEN = "hostile-bench-token"
HANG_SECONDS = 5.0
GROWTH_MIB = 64.0
HOSTILE_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1", "1e23", "0", "-0.0", "99999999999999999999999"]
HOSTILE_STRINGS = ["", " ", "\x00", "../../etc/passwd", "'; DROP TABLE decisions; --", "\u202e", "A" * 5000]
TARGETS = (
    "webhook", "ingest", "router_api", "alert_log", "predictor_metrics", "twin_pages",
    "textparse", "config", "traces", "actions", "file_backend", "redis_backend",
)  # fmt: skip


# --- drawing: one interface over Hypothesis and random.Random -------------------------------------------------------
class Draw:
    """What a generator asks for; `HypoDraw` and `RandomDraw` answer it."""

    def choice(self, seq): ...
    def integer(self, lo: int, hi: int) -> int: ...
    def text(self, max_size: int) -> str: ...
    def boolean(self) -> bool:
        return self.integer(0, 1) == 1

    def json_value(self, depth: int = 0):
        kind = self.integer(0, 8 if depth < 4 else 4)
        if kind == 0:
            return None
        if kind == 1:
            return self.boolean()
        if kind == 2:
            return self.choice([0, -1, 1, 2**63, -(2**70), 10**30])
        if kind == 3:
            return self.choice([0.5, -1.5, 1e308, math.nan, math.inf, -math.inf, 5e-324])
        if kind == 4:
            return self.choice([*HOSTILE_STRINGS, self.text(40)])
        if kind in (5, 6):
            return [self.json_value(depth + 1) for _ in range(self.integer(0, 4))]
        return {self.choice(["pool", "kind", "status", "labels", "x", self.text(10)]): self.json_value(depth + 1)
                for _ in range(self.integer(0, 4))}  # fmt: skip


class RandomDraw(Draw):
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def choice(self, seq):
        return seq[self.rng.randrange(len(seq))]

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def text(self, max_size: int) -> str:
        n = self.rng.randint(0, max_size)
        return "".join(chr(self.rng.choice((self.rng.randint(32, 126), self.rng.randint(0, 0x2FFF)))) for _ in range(n))


class HypoDraw(Draw):
    def __init__(self, data) -> None:
        from hypothesis import strategies as st

        self.data, self.st = data, st

    def choice(self, seq):
        return self.data.draw(self.st.sampled_from(list(seq)))

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))

    def text(self, max_size: int) -> str:
        return self.data.draw(self.st.text(max_size=max_size))


def run_examples(n: int, seed: int, body: Callable[[Draw], None], engine: str) -> None:
    """Call `body` with `n` fresh draws (Hypothesis or random)."""
    if engine == "hypothesis":
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis import seed as hypothesis_seed
        from hypothesis import strategies as st

        @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @hypothesis_seed(seed)
        @given(st.data())
        def go(data) -> None:
            body(HypoDraw(data))

        go()
    else:
        rng = random.Random(seed)
        for _ in range(n):
            body(RandomDraw(rng))


# --- the tally --------------------------------------------------------------------------------------------------------
@dataclass
class Tally:
    target: str
    payloads: int = 0
    crashes: int = 0
    hangs: int = 0
    growth_mib: float = 0.0
    silent_drops: int = 0
    contained: int = 0  # a backend raising outside its contract, caught by the daemon's own path (not a failure)
    examples: list[str] = field(default_factory=list)  # the first few findings, for the reader

    def note(self, what: str, detail: str) -> None:
        setattr(self, what, getattr(self, what) + 1)
        if len(self.examples) < 5:
            self.examples.append(f"{what}: {detail[:300]}")

    @property
    def growth(self) -> int:
        return int(self.growth_mib > GROWTH_MIB)


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# --- listeners --------------------------------------------------------------------------------------------------------
def mutate_json(d: Draw, base: dict) -> object:
    """`base` with a few fields replaced by hostile values, or something else entirely."""
    how = d.integer(0, 5)
    if how == 0:
        return d.json_value()
    doc = json.loads(json.dumps(base))
    for _ in range(d.integer(1, 3)):
        node, key = doc, None
        while isinstance(node, dict | list) and node and d.boolean():
            key = d.choice(list(node)) if isinstance(node, dict) else d.integer(0, len(node) - 1)
            if not isinstance(node[key], dict | list):
                break
            node = node[key]
        if isinstance(node, dict) and node:
            node[d.choice(list(node))] = d.json_value()
        elif isinstance(node, list) and node:
            node[d.integer(0, len(node) - 1)] = d.json_value()
    return doc


def body_bytes(d: Draw, base: dict) -> tuple[bytes, str]:
    """A request body and its content type: mutated JSON mostly; raw garbage, deep nesting, huge numbers too."""
    how = d.integer(0, 9)
    if how == 0:
        return ("[" * d.integer(100, 100_000)).encode(), "application/json"
    if how == 1:
        return b'{"n": ' + b"9" * d.integer(400, 5000) + b"}", "application/json"
    if how == 2:
        return d.text(200).encode("utf-8", "surrogatepass"), d.choice(["application/json", "text/xml", "text/plain"])
    if how == 3:
        return bytes(d.integer(0, 255) for _ in range(d.integer(0, 64))), "application/json"
    return json.dumps(mutate_json(d, base), allow_nan=True).encode(), "application/json"


def raw_request(port: int, d: Draw) -> bytes:
    """A request written by hand: bad request lines, Content-Length lies, header floods."""
    how = d.integer(0, 4)
    if how == 0:
        return d.text(100).encode("utf-8", "surrogatepass") + b"\r\n\r\n"
    if how == 1:
        return b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"
    if how == 2:
        return b"POST / HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * d.integer(100, 2000) + b"\r\n"
    if how == 3:
        return b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\nabc"
    return b"GET /" + b"../" * d.integer(1, 400) + b" HTTP/1.1\r\nHost: x\r\n\r\n"


def fire_raw(port: int, payload: bytes) -> tuple[str, str]:
    """('ok'|'crash'|'hang', detail) for a hand-written request: any HTTP answer or a clean close is fine."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=HANG_SECONDS) as s:
            with contextlib.suppress(OSError):
                s.sendall(payload)
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_WR)
            got = b""
            while len(got) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
    except TimeoutError:
        return "hang", f"no answer in {HANG_SECONDS:g}s to {payload[:60]!r}"
    except (ConnectionResetError, BrokenPipeError):
        return "ok", ""  # the server closed on garbage: fine
    if time.monotonic() - t0 > HANG_SECONDS:
        return "hang", f"{time.monotonic() - t0:.1f}s"
    if got.startswith(b"HTTP/1.1 5") or got.startswith(b"HTTP/1.0 5"):
        return "crash", got[:120].decode("latin-1")
    return "ok", ""


def tally_raw(t: Tally, port: int, d: Draw) -> None:
    """A hand-written request at `port` (`raw_request`), a crash or a hang tallied."""
    verdict, detail = fire_raw(port, raw_request(port, d))
    if verdict != "ok":
        t.note("crashes" if verdict == "crash" else "hangs", detail)


def tally_answer(t: Tally, send: Callable[[], object], sent: str, about: str, reason_due: bool = True) -> None:
    """One hostile request (`send`) tallied as the listeners are judged: no answer, or a slow one, is a hang; a
    dropped connection or a 5xx a crash; a 4xx without an `error` a silent drop (`reason_due` off: no body owed,
    a HEAD's).  `sent` names the request where it got no answer, `about` where it did."""
    import requests

    t0 = time.monotonic()
    try:
        r = send()
    except requests.Timeout:
        t.note("hangs", sent)
        return
    except requests.ConnectionError as e:
        t.note("crashes", f"{sent}: connection dropped: {str(e)[:100]}")
        return
    if time.monotonic() - t0 > HANG_SECONDS:
        t.note("hangs", f"{time.monotonic() - t0:.1f}s for {about}")
    if r.status_code >= 500:
        t.note("crashes", f"HTTP {r.status_code} for {about}: {r.text[:120]}")
    elif r.status_code >= 400 and reason_due:
        try:
            why = r.json().get("error")
        except (ValueError, AttributeError):
            why = None
        if not why:
            t.note("silent_drops", f"HTTP {r.status_code} without a reason for {about}")


@dataclass
class Listener:
    name: str
    port: int
    path: str
    health: str
    base: dict
    headers: Callable[[Draw], dict[str, str]] = lambda d: {}
    health_body: dict | None = None  # a listener with no read route: healthy when this POST answers 200


def _latin1(v: str) -> bool:
    try:
        v.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def answers_health(session: requests.Session, route: str, body: dict | None = None) -> bool:
    """Whether a listener's health `route` answers 200: a GET, or where the listener has no read route an
    authorised POST of `body`; no answer in `HANG_SECONDS` is not healthy."""
    import requests

    try:
        if body is not None:
            h = {"Authorization": f"Bearer {TOKEN}"}
            return session.post(route, json=body, headers=h, timeout=HANG_SECONDS).ok
        return session.get(route, timeout=HANG_SECONDS).status_code == 200
    except requests.RequestException:
        return False


def fire_listener(li: Listener, n: int, seed: int, engine: str) -> Tally:
    import requests

    t = Tally(li.name)
    session = requests.Session()
    session.trust_env = False
    url = f"http://127.0.0.1:{li.port}"

    def healthy() -> bool:
        return answers_health(session, url + li.health, li.health_body)

    def one(d: Draw) -> None:
        t.payloads += 1
        if d.integer(0, 9) == 0:
            tally_raw(t, li.port, d)
        else:
            body, ctype = body_bytes(d, li.base)
            h = {"Authorization": f"Bearer {TOKEN}", "Content-Type": ctype, **li.headers(d)}
            tally_answer(
                t,
                lambda: session.post(url + li.path, data=body, headers=h, timeout=HANG_SECONDS),
                sent=f"POST {li.path} {body[:80]!r}",
                about=f"{body[:80]!r}",
            )
        if t.payloads % 50 == 0 and not healthy():
            t.note("crashes", f"GET {li.health} failed after {t.payloads} payloads")

    measure(t, n, seed, engine, one)
    if not healthy():
        t.note("crashes", f"GET {li.health} failed at the end")
    session.close()
    return t


def start_listeners(stack: contextlib.ExitStack) -> list[Listener]:
    from infercast.actuators.daemon import Daemon
    from infercast.actuators.leader import SingleReplica
    from infercast.actuators.tick import TickReport
    from infercast.actuators.webhook import Inbox, WebhookReceiver
    from infercast.config import load_config
    from infercast.exporters.server import Exporter, ExporterServer
    from infercast.simulator.twin.fleet import build_fleet
    from infercast.simulator.twin.surfaces import TwinServer

    cfg = load_config(REPO / "examples" / "flash-sale.yaml")
    daemon = Daemon(lambda now, ctx: TickReport(), SingleReplica(), mode="active", token=TOKEN,
                    webhook=WebhookReceiver(Inbox()))  # fmt: skip
    daemon.http.start()  # the listener only: no scheduler, so no tick runs
    stack.callback(daemon.http.close)
    exporter = ExporterServer(Exporter(cfg, []), "127.0.0.1", 0, token=TOKEN).start()
    stack.callback(exporter.close)
    twin = TwinServer(build_fleet(cfg), token=TOKEN).start()
    stack.callback(twin.stop)
    alert = {
        "version": "4", "status": "firing", "receiver": "actuator", "groupKey": "{}:{}",
        "alerts": [{"status": "firing", "labels": {"alertname": "KVCacheBreachPredicted", "pool": "v4-main"},
                    "annotations": {"summary": "s"}, "startsAt": "2026-12-04T10:00:00Z",
                    "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "abc"}],
    }  # fmt: skip
    ingest = {"requests": [{"pool": "v4-main", "version": "v4", "priority": "normal", "outcome": "ok", "count": 3}]}

    def router_headers(d: Draw) -> dict[str, str]:
        h = {}
        if d.boolean():
            h["Idempotency-Key"] = d.choice(["k-1", "", "a" * 500, "../x", "k\u00e9", d.text(20)])
        if d.boolean():
            # Unicode digits ("²".isdigit() is true, int() refuses it: a 500 before issue 36 item 7), in latin-1 as
            # a client's header and as raw UTF-8 bytes
            h["X-Fencing-Token"] = d.choice(["1", "-1", "999999999999999999999", "NaN", "0x10", "²", "1²",
                                             "\u00b9\u00b2", "\u0663", "\uff13", "\U0001d7d9", "7\t",
                                             d.text(10)])  # fmt: skip
        return {
            k: (v if _latin1(v) else v.encode("utf-8", "surrogatepass"))
            for k, v in h.items()
            if "\n" not in v and "\r" not in v and not v[:1].isspace()
        }  # fmt: skip  (requests refuses those)

    from infercast.alertrules.webhook import WebhookRecorder

    log = WebhookRecorder(token=TOKEN).serve()
    stack.callback(log.close)
    twin_port = int(twin.url.rsplit(":", 1)[1])
    return [
        Listener("webhook", daemon.http.port, "/api/v1/alerts", "/metrics", alert),
        Listener("ingest", exporter.port, "/ingest/router", "/metrics", ingest),
        Listener(
            "router_api",
            twin_port,
            "/v1/actions",
            "/v1/fleet",
            {"kind": "set_pool_weight", "pool": "v4-main", "weight": 0.5},
            router_headers,
        ),
        Listener("alert_log", log.port, "/alerts", "/alerts", alert, health_body=alert),
    ]


# --- read-only listeners ------------------------------------------------------------------------------------------
@dataclass
class Reader:
    name: str
    port: int
    paths: list[str]  # the read routes; `{}` is where a hostile path segment goes
    health: str  # a route that must answer 200 throughout


def hostile_segment(d: Draw) -> str:
    return d.choice([
        "..", "../../etc/passwd", "%2e%2e%2f%2e%2e%2fetc%2fpasswd", "%00", "%ff%fe", "a" * 8000, "node-0;rm -rf /",
        "%25" * 200, "\\..\\..", "node-0/../../x", "~", "*", "%0d%0aSet-Cookie:%20x=1", d.text(30),
    ])  # fmt: skip


def hostile_get(d: Draw, li: Reader) -> tuple[str, str, dict[str, str], bytes | None]:
    """(method, path, headers, body): a read route with a hostile segment, query or headers, or another method."""
    from urllib.parse import quote

    path = d.choice(li.paths)
    seg = hostile_segment(d)
    if "{}" in path:
        path = path.replace("{}", seg if seg.isascii() and seg.isprintable() else quote(seg, safe=""))
    elif d.boolean():
        path = path + "/" + quote(seg, safe="%./")
    if d.boolean():
        path += "?" + d.choice(["a=" + "b" * 6000, "&&&=&", "x=%ff", "name[]=1&name[]=2", quote(d.text(50))])
    headers = {}
    if d.boolean():
        headers[d.choice(["Accept", "Accept-Encoding", "Range", "X-Forwarded-For", "Authorization", "Cookie"])] = (
            d.choice(["*/*;q=NaN", "gzip;q=1e400", "bytes=-1-9999999999", "Bearer " + "x" * 7000, "a, " * 500])
        )  # fmt: skip
    method = d.choice(["GET", "GET", "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
    body = None
    if method in ("POST", "PUT", "PATCH"):
        body = json.dumps(d.json_value(), allow_nan=True).encode()
    return method, path.replace(" ", "%20"), headers, body


def fire_reader(li: Reader, n: int, seed: int, engine: str) -> Tally:
    """Hostile requests at a read-only listener (no token): any answer but a 5xx, a reasonless 4xx, a dropped
    connection or a hang is fine, and the health route keeps answering 200."""
    import requests

    t = Tally(li.name)
    session = requests.Session()
    session.trust_env = False
    url = f"http://127.0.0.1:{li.port}"

    def healthy() -> bool:
        return answers_health(session, url + li.health)

    def one(d: Draw) -> None:
        t.payloads += 1
        if d.integer(0, 4) == 0:
            tally_raw(t, li.port, d)
        else:
            method, path, headers, body = hostile_get(d, li)
            what = f"{method} {path[:80]}"
            tally_answer(
                t,
                lambda: session.request(method, url + path, headers=headers, data=body, timeout=HANG_SECONDS),
                sent=what,
                about=what,
                reason_due=method != "HEAD",
            )
        if t.payloads % 50 == 0 and not healthy():
            t.note("crashes", f"GET {li.health} failed after {t.payloads} payloads")

    measure(t, n, seed, engine, one)
    if not healthy():
        t.note("crashes", f"GET {li.health} failed at the end")
    session.close()
    return t


def forecasts() -> list:
    """A snapshot of forecasts as the predictor publishes them (every label of the KV family filled)."""
    from infercast.catalog import FORECAST_KV_CACHE_USAGE_RATIO, spec
    from infercast.predictors.publish import sample

    out = []
    for i, value in enumerate([0.42, 0.9, math.nan, math.inf]):
        labels = {k: (allowed[0] if allowed else f"x{i}") for k, allowed in
                  ((k, dict(spec(FORECAST_KV_CACHE_USAGE_RATIO).enums).get(k)) for k in
                   spec(FORECAST_KV_CACHE_USAGE_RATIO).labels)}  # fmt: skip
        out.append(sample(FORECAST_KV_CACHE_USAGE_RATIO, value, **labels))
    return out


def start_readers(stack: contextlib.ExitStack) -> list[Reader]:
    """The predictor's /metrics (serving a snapshot of real forecasts) and the twin's node pages, on loopback."""
    from infercast.config import load_config
    from infercast.predictors.cli import forecasts_service
    from infercast.predictors.publish import LatestSamples
    from infercast.simulator.twin.fleet import build_fleet
    from infercast.simulator.twin.surfaces import TwinServer

    cfg = load_config(REPO / "examples" / "flash-sale.yaml")
    latest = LatestSamples()
    latest.set(forecasts())
    predictor = forecasts_service(latest, "127.0.0.1:0")
    stack.callback(predictor.close)
    fleet = build_fleet(cfg)
    twin = TwinServer(fleet, token=TOKEN).start()
    stack.callback(twin.stop)
    node = fleet.nodes[0].name
    return [
        Reader("predictor_metrics", predictor.port, ["/metrics", "/{}", "/metrics/{}"], "/metrics"),
        Reader(
            "twin_pages",
            int(twin.url.rsplit(":", 1)[1]),
            ["/pools", "/nodes", f"/nodes/{node}/metrics", "/nodes/{}/metrics", "/{}"],
            f"/nodes/{node}/metrics",
        ),
    ]


# --- parsers ----------------------------------------------------------------------------------------------------------
def _timed(t: Tally, what: str, fn: Callable[[], object], allowed: tuple[type[BaseException], ...]) -> object:
    t0 = time.monotonic()
    out = None
    try:
        out = fn()
    except allowed as e:
        if not str(e).strip():
            t.note("silent_drops", f"{what}: {type(e).__name__} without a message")
    except RecursionError as e:
        t.note("crashes", f"{what}: RecursionError {str(e)[:80]}")
    except Exception as e:
        t.note("crashes", f"{what}: {type(e).__name__}: {str(e)[:200]}")
    if time.monotonic() - t0 > HANG_SECONDS:
        t.note("hangs", f"{what}: {time.monotonic() - t0:.1f}s")
    return out


def measure(t: Tally, n: int, seed: int, engine: str, one: Callable[[Draw], None]) -> Tally:
    """`one` on a random warm-up, then on `n` draws of `engine`: the memory growth is counted from after the warm-up
    (its imports and caches are not a leak), the findings and payloads from the first draw (a crash in the warm-up
    is a crash)."""
    run_examples(max(5, n // 10), seed, one, "random")
    gc.collect()
    before = rss_mib()
    run_examples(n, seed + 1, one, engine)
    gc.collect()
    t.growth_mib = max(0.0, rss_mib() - before)
    return t


def fire_textparse(n: int, seed: int, engine: str) -> Tally:
    import re

    from infercast.exporters.base import ScrapeError, Target, TextParser
    from infercast.exporters.sources import MODULES

    pages = {
        "vllm": ["vllm.prom", "vllm-chat-v3.5.prom"], "sglang": ["sglang.prom"], "tgi": ["tgi.prom"],
        "trtllm": ["tensorrt-llm-triton.prom", "tensorrt-llm-readme.prom"], "dcgm": ["dcgm-exporter.prom"],
    }  # fmt: skip
    texts = {k: [(REPO / "tests" / "data" / "engines" / f).read_text() for f in fs] for k, fs in pages.items()}
    target = Target("hostile", "vllm", "http://127.0.0.1:1/metrics", pool="v4-main", version="v4", max_batch=512)
    lead = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)")
    t = Tally("textparse")

    def one(d: Draw) -> None:
        t.payloads += 1
        kind = d.choice(sorted(texts))
        lines = d.choice(texts[kind]).split("\n")
        for _ in range(d.integer(1, 4)):
            i = d.integer(0, len(lines) - 1)
            line, op = lines[i], d.integer(0, 5)
            if op == 0 and " " in line:
                lines[i] = line.rsplit(" ", 1)[0] + " " + d.choice([*HOSTILE_NUMBERS, "57.0", "1_0", "x"])
            elif op == 1:
                lines.insert(i, d.text(60))
            elif op == 2:
                lines.insert(i, line)
            elif op == 3 and "{" in line:
                lines[i] = line.replace("{", "{" + d.choice(['a="', "b=1,", ",,", 'c="\\']), 1)
            elif op == 4:
                lines[i] = line[: d.integer(0, len(line))]
            else:
                lines.insert(i, line.split("{")[0].split(" ")[0] + '{x="' + "y" * d.integer(0, 3000) + '"} 1')
        text = "\n".join(lines)
        mod = MODULES[kind]
        p = TextParser(mod.WANTED, mod.MAXIMA, isolate=True)

        def parse() -> None:
            p.feed(text)
            raw = p.result()
            kw = {"errors": p.errors} if kind == "trtllm" else {}
            mod.build(raw, target, **kw)
            on_page = {m.group(1) for ln in text.split("\n") if (m := lead.match(ln)) and not ln.startswith("#")}
            lost = (on_page & mod.WANTED) - set(raw) - set(p.errors)
            if lost:
                t.note("silent_drops", f"{kind}: {sorted(lost)} neither kept nor reported")

        _timed(t, f"{kind} page", parse, (ScrapeError,))

    return measure(t, n, seed, engine, one)


def fire_config(n: int, seed: int, engine: str, tmp: Path) -> Tally:
    import yaml

    from infercast.config import ConfigError, load_config

    base = (REPO / "examples" / "flash-sale.yaml").read_text()
    data = yaml.safe_load(base)
    t = Tally("config")

    def one(d: Draw) -> None:
        t.payloads += 1
        how = d.integer(0, 4)
        if how == 0:
            text = d.choice(["a: &a [*a]", "&a [" + "*a, " * 50 + "]", "{" * 5000, "!!python/object:os.system x",
                             "pools:\n  a: 1\n  a: 2\n", d.text(300), "[" * 5000, "- " * 3000 + "x",
                             "a:\n" + "".join(f"{' ' * (i + 1)}k{i}:\n" for i in range(200)),
                             "x-a: &a {nodes: 1}\npools:\n  p:\n    <<: *a\n    <<: *a\n",
                             "x-a: &a {b: &b [" + "1," * 100 + "]}\n"
                             + "".join(f"x-{i}: [{'*a,' * 50}]\n" for i in range(50)),
                             ])  # fmt: skip
        elif how == 3 and d.boolean():  # over the size cap (issue 36 item 6: 120k keys took 28 s before the cap)
            text = base + "\n".join(f"x-k{i}: {i}" for i in range(d.integer(80_000, 120_000)))
        elif how == 1:
            lines = base.split("\n")
            i = d.integer(0, len(lines) - 1)
            lines.insert(i, lines[i])  # a repeated key (or a repeated list item)
            text = "\n".join(lines)
        elif how == 4 and d.boolean():  # a duration or count without bound (issue 36 item 5)
            doc = json.loads(json.dumps(data))
            section, key = d.choice([("actuator", "interval_seconds"), ("actuator", "misfire_grace_seconds"),
                                     ("guardrails", "cooldown_seconds"), ("policy", "relax_hold_seconds"),
                                     ("guardrails", "change_budget_per_hour"), ("router", "cold_start_seconds"),
                                     ("predictor", "horizon_seconds"),
                                     ("router", "health_check_failures")])  # fmt: skip
            doc.setdefault(section, {})[key] = d.choice([math.inf, -math.inf, math.nan, 1e308, 1e300, 10**30, 2**63])
            text = yaml.safe_dump(doc)
        else:
            doc = mutate_json(d, data)
            text = json.dumps(doc, allow_nan=True) if d.boolean() else yaml.safe_dump(doc)
        path = tmp / "fleet.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        _timed(t, "fleet file", lambda: load_config(path), (ConfigError,))

    return measure(t, n, seed, engine, one)


def fire_traces(n: int, seed: int, engine: str, tmp: Path) -> Tally:
    from infercast.simulator.replay.traces import TraceError, load_trace

    t = Tally("traces")
    row = "2023-11-16 18:17:03.9799600,4808,10"

    def one(d: Draw) -> None:
        t.payloads += 1
        fmt = d.integer(0, 2)
        bad = d.choice([*HOSTILE_NUMBERS, d.text(12), "", "1.5", "2023-13-45"])
        if fmt == 0:
            rows = ["TIMESTAMP,ContextTokens,GeneratedTokens", row]
            rows += [d.choice([f"{row[:27]},{bad},3", f"{bad},1,2", f"{row},{bad}", d.text(40)])]
            path = tmp / "t.csv"
        elif fmt == 1:
            rec = {"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1]}
            rec[d.choice(list(rec))] = d.json_value()
            rows = ['{"timestamp": 0, "input_length": 10, "output_length": 1}', json.dumps(rec, allow_nan=True)]
            path = tmp / "t.jsonl"
        else:
            rows = ["0,1.0,1.0,Gamma,1.0,1.0", ",".join(d.choice(["600", bad, "Gamma", "1.0"]) for _ in range(6))]
            path = tmp / "chunk-0-trace.csv"
        path.write_text("\n".join(rows) + "\n", encoding="utf-8", errors="surrogatepass")
        _timed(t, path.name, lambda: load_trace(path, end_s=600.0), (TraceError,))

    return measure(t, n, seed, engine, one)


def fire_actions(n: int, seed: int, engine: str) -> Tally:
    from infercast.actuators.actions import ActionError, parse_action

    t = Tally("actions")
    base = {"kind": "set_admission", "memory_limit": 0.8, "max_context_tokens": 16000}

    def one(d: Draw) -> None:
        t.payloads += 1
        doc = mutate_json(d, base) if d.boolean() else {**base, "kind": d.choice(
            ["scale_pool", "set_pool_weight", "set_rate_limit", "prewarm_pool", "nope", d.text(10)])}  # fmt: skip
        _timed(t, "action", lambda: parse_action(doc), (ActionError,))

    return measure(t, n, seed, engine, one)


# --- the backends' stored documents ---------------------------------------------------------------------------------
KEY = "hostile-key"


def backend_round(t: Tally, admin, action) -> None:
    """Everything the daemon reads from a backend's store: `observe` and `fence` (BackendError or ActionRefused
    allowed), an apply and a lookup by idempotency key, and the daemon's read-back of a lost answer and restart
    recovery (which must never raise).  A backend's apply or lookup raising anything else is counted as
    `contained` (the daemon's `apply_with_retries` records it `failed` with the error, the read-back `unknown`)
    with the error named, and must then be contained: the daemon's own path raising is a crash."""
    from infercast.actuators.admin import ActionRefused, BackendError, Result, apply_with_retries
    from infercast.actuators.audit import Audit
    from infercast.actuators.recovery import read_back, reconcile_unknown, resolve_in_flight
    from infercast.actuators.stamp import Stamp, stamped

    documented = (BackendError, ActionRefused)
    _timed(t, f"{admin.name} observe", admin.observe, documented)
    _timed(t, f"{admin.name} fence", admin.fence, documented)
    for what, call in (
        ("lookup", lambda: admin.lookup(KEY)),
        ("apply", lambda: admin.apply(action, stamp=Stamp(key="hostile-apply"))),
    ):
        try:
            call()
        except documented:
            pass
        except Exception as e:
            t.note("contained", f"{admin.name} {what} raised {type(e).__name__}: {str(e)[:160]}")

    def apply() -> None:
        res = apply_with_retries(stamped(admin, Stamp(key="hostile-apply-2")), action, sleep=lambda s: None)
        if res.status != "applied" and not res.detail:
            t.note("silent_drops", f"{admin.name} apply {res.status} without a detail")

    def recover() -> None:
        verdict, _found, how = read_back(admin, KEY, action)
        if not how:
            t.note("silent_drops", f"{admin.name} read back {verdict} without saying how")
        with tempfile.TemporaryDirectory() as tmp, Audit(Path(tmp) / "a.db") as audit:
            i = audit.record_decision(0.0, KEY, action, {})
            j = audit.record_decision(0.0, KEY + "-2", action, {})
            audit.mark_unknown(j, Result("failed", "lost", attempts=3), "lost", 0.0)
            resolve_in_flight(audit, admin, 1.0)
            reconcile_unknown(audit, admin, 2.0)
            for d in (audit.get(i), audit.get(j)):
                if d is not None and d.status not in ("decided", "unknown") and not d.detail:
                    t.note("silent_drops", f"{admin.name}: decision {d.status} without a detail")

    _timed(t, f"{admin.name} read-back and recovery", recover, ())
    _timed(t, f"{admin.name} the daemon's apply", apply, ())


def fire_file_backend(n: int, seed: int, engine: str, tmp: Path) -> Tally:
    import yaml

    from infercast.actuators.actions import SetPoolWeight
    from infercast.actuators.backends.file import FileAdmin
    from infercast.actuators.stamp import Stamp
    from infercast.config import load_config

    cfg = load_config(REPO / "examples" / "flash-sale.yaml")
    pool = sorted(cfg.pools)[0]
    action = SetPoolWeight(pool, 0.5)
    path = tmp / "router.yaml"
    admin = FileAdmin(path, cfg)
    admin.apply(action, stamp=Stamp(key=KEY, fencing_token=3))
    base = yaml.safe_load(path.read_text())
    t = Tally("file_backend")

    def one(d: Draw) -> None:
        t.payloads += 1
        how = d.integer(0, 5)
        if how == 0:
            text = d.choice(["{" * 5000, "a: &a [*a]", "!!python/object:os.system x", "\x00\xff", d.text(300), ""])
        elif how == 1:
            doc = json.loads(json.dumps(base))
            doc["infercast"]["applied"][KEY] = d.choice([
                *HOSTILE_STRINGS, "{}", "[]", '{"previous": {"kind": "nope"}}', '{"previous": 5}',
                '{"previous": {"kind": "set_pool_weight", "pool": "x", "weight": "NaN"}}', d.json_value(),
            ])  # fmt: skip
            text = yaml.safe_dump(doc)
        elif how == 2:
            doc = json.loads(json.dumps(base))
            doc["infercast"]["fencing_token"] = d.json_value()
            text = json.dumps(doc, allow_nan=True)
        else:
            doc = mutate_json(d, base)
            text = json.dumps(doc, allow_nan=True) if d.boolean() else yaml.safe_dump(doc)
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        backend_round(t, FileAdmin(path, cfg), action)

    return measure(t, n, seed, engine, one)


def fire_redis_backend(n: int, seed: int, engine: str, tmp: Path) -> Tally | None:
    """None when there is no redis-server to run."""
    import shutil
    import subprocess

    if shutil.which("redis-server") is None:
        return None
    import redis as redislib

    from infercast.actuators.actions import SetPoolWeight
    from infercast.actuators.backends.redis import RedisAdmin
    from infercast.actuators.stamp import Stamp
    from infercast.config import load_config
    from infercast.simulator.twin.admin import TwinAdmin
    from infercast.simulator.twin.fleet import build_fleet

    sock = tmp / "redis.sock"
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no",
         "--dir", str(tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        cfg = load_config(REPO / "examples" / "flash-sale.yaml")
        state = TwinAdmin(build_fleet(cfg)).observe()
        pool = state.pools[0].name
        action = SetPoolWeight(pool, 0.5)
        r = redislib.Redis(unix_socket_path=str(sock), socket_timeout=HANG_SECONDS, decode_responses=True)
        admin = RedisAdmin(r, "hostile")
        t = Tally("redis_backend")
        hashes = [
            f"hostile:pool:{pool}",
            "hostile:fleet",
            "hostile:applied",
            f"hostile:lane:{sorted(state.rate_limits)[0] if state.rate_limits else 'shared'}",
        ]

        def mutate(d: Draw) -> None:
            how = d.integer(0, 5)
            value = d.choice([*HOSTILE_NUMBERS, *HOSTILE_STRINGS, "true", "{}", d.text(20)])
            if how == 0:
                field = d.choice(["weight", "replicas", "ready", "standby", "breaker_threshold_seconds",
                                  "reservoir", "spare", "version", d.text(8) or "x"])  # fmt: skip
                r.hset(hashes[0], field, value)
            elif how == 1:
                r.hset("hostile:fleet", d.choice(["fencing_token", "memory_limit", "max_context_tokens"]), value)
            elif how == 2:
                r.hset(
                    "hostile:applied",
                    KEY,
                    d.choice(
                        [
                            value,
                            "{}",
                            '{"action": "{}", "previous": 5}',
                            json.dumps({"action": d.text(20), "previous": {}}),
                        ]
                    ),
                )
            elif how == 3:
                key = d.choice([*hashes, "hostile:pools", "hostile:lanes"])
                r.delete(key)
                r.set(key, value) if d.boolean() else r.rpush(key, value)  # the wrong type
            elif how == 4:
                r.sadd(d.choice(["hostile:pools", "hostile:lanes"]), value or "x")
            else:
                r.hset(hashes[3], "rps", value)

        def one(d: Draw) -> None:
            t.payloads += 1
            r.flushdb()
            admin.seed(state)
            admin.apply(action, stamp=Stamp(key=KEY, fencing_token=3))
            for _ in range(d.integer(1, 3)):
                with contextlib.suppress(redislib.ResponseError):  # an earlier one made the key another type
                    mutate(d)
            backend_round(t, admin, action)

        return measure(t, n, seed, engine, one)
    finally:
        proc.terminate()
        proc.wait(timeout=15)


# --- the run ----------------------------------------------------------------------------------------------------------
def run(n: int, seed: int, engine: str) -> list[Tally]:
    import logging

    logging.disable(logging.WARNING)  # the listeners log every refusal; the counts are what this prints
    per = math.ceil(n / len(TARGETS))
    out: list[Tally] = []
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        for li in start_listeners(stack):
            out.append(fire_listener(li, per, seed, engine))
        for reader in start_readers(stack):
            out.append(fire_reader(reader, per, seed, engine))
        out.append(fire_textparse(per, seed, engine))
        out.append(fire_config(per, seed, engine, Path(tmp)))
        out.append(fire_traces(per, seed, engine, Path(tmp)))
        out.append(fire_actions(per, seed, engine))
        out.append(fire_file_backend(per, seed, engine, Path(tmp)))
        redis = fire_redis_backend(per, seed, engine, Path(tmp))
        if redis is None:
            print("redis_backend: skipped (no redis-server on PATH)", file=sys.stderr)
        else:
            out.append(redis)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1200, help="hostile payloads in all, at least (default 1200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engine", choices=("hypothesis", "random"), default=None,
                   help="the generator (default: Hypothesis when installed)")  # fmt: skip
    p.add_argument("--json", help="also write the counts here")
    args = p.parse_args(argv)
    engine = args.engine
    if engine is None:
        try:
            import hypothesis  # noqa: F401

            engine = "hypothesis"
        except ImportError:
            engine = "random"
    t0 = time.monotonic()
    tallies = run(args.n, args.seed, engine)
    print(f"hostile input ({engine}, seed {args.seed}): {sum(x.payloads for x in tallies)} payloads in "
          f"{time.monotonic() - t0:.0f} s")  # fmt: skip
    head = ("target", "payloads", "crashes", "hangs", "growth", "MiB", "silent", "contained")
    print("{:<17} {:>8} {:>8} {:>6} {:>7} {:>6} {:>7} {:>9}".format(*head))
    for x in tallies:
        print(f"{x.target:<17} {x.payloads:>8} {x.crashes:>8} {x.hangs:>6} {x.growth:>7} {x.growth_mib:>6.1f} "
              f"{x.silent_drops:>7} {x.contained:>9}")  # fmt: skip
        for e in x.examples:
            print(f"    {e}")
    bad = sum(x.crashes + x.hangs + x.growth + x.silent_drops for x in tallies)
    total = sum(x.payloads for x in tallies)
    print(
        f"total: {total} payloads; crashes {sum(x.crashes for x in tallies)}, hangs {sum(x.hangs for x in tallies)},"
        f" memory growth {sum(x.growth for x in tallies)}, silent drops {sum(x.silent_drops for x in tallies)}"
        f" (contained backend errors, not counted: {sum(x.contained for x in tallies)})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"engine": engine, "seed": args.seed,
                                               "targets": [asdict(x) for x in tallies]}, indent=2))  # fmt: skip
    return 0 if bad == 0 and total >= args.n else 1


if __name__ == "__main__":
    raise SystemExit(main())
