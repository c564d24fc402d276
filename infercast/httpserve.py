"""One front door for every infercast HTTP listener: strict requests in, JSON errors out, nothing unbounded.

The exporter (`/metrics`, `POST /ingest/router`), the twin (node metrics and its admin API), the alert webhook and
the predictor's `/metrics` all serve through `HttpService`; a later actuator daemon (webhook receiver, admin
endpoints) is meant to as well.  A service is a list of `Route`s.  A handler gets a `Request` whose body has
already been size-checked and read, and returns a `Response` (or raises `HttpError`):

    def set_weight(req: Request) -> Response:
        body = req.json()                                     # depth-limited, NaN/Infinity/1e999 refused
        weight = finite(body.get("weight"), "weight", minimum=0.0)
        ...
        return Response.json({"ok": True})

    service = HttpService([Route("POST", "/pools/{pool}/weight", set_weight, mutates=True)], port=0).start()

What every listener gets, and why:
- **Content-Length is strict.**  A body-carrying method (POST, PUT, PATCH) needs one `Content-Length` of decimal
  digits (`-1`, `+5`, `1e3`, two different values: 400; absent or chunked: 411), at most the route's
  `max_body_bytes` (413) -- checked before a byte of the body is read, so no one can make a listener read past its
  cap.  Other methods take no body.
- **A read deadline per request.**  Request line, headers and body must all arrive within
  `Limits.read_timeout_seconds` of the request's start (not per `recv`: a client dribbling one byte a second is cut
  off too); an idle keep-alive connection is closed after the same time.
- **A bounded number of connections.**  At most `Limits.max_connections` at once.  When full, the connection that
  has waited longest for its request is dropped to make room (idle or slow-loris clients cannot lock out a
  scraper); when every connection is busy being answered, the new one gets 503 at once.
- **Every refusal is JSON**: `{"error": "<reason>"}` with 400/401/404/405/408/411/413/503, never an HTML page, a
  dropped connection or a traceback; a handler bug is a 500 naming the exception type (logged once with its stack).
- **Bodies parse strictly** (`Request.json`, `parse_json`): nesting deeper than `Limits.max_json_depth` is a 400
  (never an uncaught RecursionError), and `NaN`, `Infinity` and overflowing numbers such as `1e999` are refused.
  `finite()` and `count()` check a number where one is expected (strings such as `"1e999"` are not numbers).
- **Optional bearer token on every route that changes state** (`Route(mutates=True)`): from the environment
  variable `INFERCAST_HTTP_TOKEN`, or a file named by `INFERCAST_HTTP_TOKEN_FILE` (one source: both set is an
  error), or the `token` argument; compared in constant time (`hmac.compare_digest`), checked before the body is
  read; 401 otherwise.  Read-only routes (`/metrics`) stay open for scrapers.  A service made with
  `closed_off_loopback=True` refuses its state-changing routes (403) when it listens beyond loopback with no token.
- **Content types**: a route with `json_body=True` refuses a body declared as anything but JSON (415, after the
  length checks, before the body is read): `text/xml` is not parsed as JSON, and the types a web page may send
  cross-origin without asking (`text/plain`, forms) never reach a loopback listener's handler.  A body sent with
  no `Content-Type` is read as JSON.
- **Errors echo little**: a reason is cut to `MAX_REASON_CHARS`, so a hostile body's 900 KB label never comes back.
- **Loopback by default**; binding anywhere else is logged as a warning (louder when state-changing routes have no
  token).
"""

from __future__ import annotations

import contextlib
import hmac
import io
import ipaddress
import json
import logging
import math
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

#: the environment variable holding the bearer token for state-changing routes (unset or empty: no auth)
TOKEN_ENV = "INFERCAST_HTTP_TOKEN"
#: the environment variable naming a file that holds that token (a mounted Secret); one of the two, never both
TOKEN_FILE_ENV = "INFERCAST_HTTP_TOKEN_FILE"
#: a token file larger than this is not a token (a wrong path: a log, a binary)
MAX_TOKEN_BYTES = 4096
#: the longest reason an error answer carries (the rest is cut, so a refused body is never echoed back whole)
MAX_REASON_CHARS = 300
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_DIGITS = re.compile(r"[0-9]{1,15}")
#: `token=FROM_ENV` (the default): read the token from INFERCAST_HTTP_TOKEN when the service is made
FROM_ENV: Any = object()


class HttpError(Exception):
    """A request refused with `status` and a one-line `reason` (sent as `{"error": reason}`)."""

    def __init__(self, status: int, reason: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = dict(headers or {})


@dataclass(frozen=True)
class Limits:
    """What one listener accepts; the defaults suit small JSON admin bodies."""

    max_body_bytes: int = 64 * 1024
    read_timeout_seconds: float = 10.0
    max_connections: int = 64
    max_json_depth: int = 32


# --- bodies ------------------------------------------------------------------------------------------------------
def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} overflows a float")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 18:
        raise ValueError(f"integer {text[:20]}... has more than 18 digits")
    return int(text)


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of decoded JSON (iterative: a deep document cannot blow the stack here)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            if d > limit:
                return d
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def parse_json(raw: bytes, max_depth: int = Limits.max_json_depth) -> Any:
    """Decode a JSON body strictly; HttpError 400 with the reason when it is not acceptable.

    Refused: invalid UTF-8 or JSON, nesting deeper than `max_depth`, `NaN`/`Infinity`, numbers that overflow a
    float (`1e999`) and integers of more than 18 digits.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HttpError(400, f"body is not UTF-8: byte {e.start}") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except RecursionError:
        raise HttpError(400, f"JSON nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as e:
        raise HttpError(400, f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except ValueError as e:
        raise HttpError(400, f"not acceptable JSON: {e}") from None
    if _depth(value, max_depth) > max_depth:
        raise HttpError(400, f"JSON nested deeper than {max_depth} levels")
    return value


def finite(value: Any, name: str, *, minimum: float | None = None, maximum: float | None = None) -> float:
    """`value` as a float when it is a finite JSON number within [minimum, maximum]; ValueError naming `name`.

    Booleans and strings are refused (`"1e999"` is not a number); so are NaN and infinities however they arrive.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}"[:200])
    try:
        v = float(value)
    except OverflowError:
        raise ValueError(f"{name} is too large") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {v:g}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name} must be <= {maximum:g}, got {v:g}")
    return v


def count(value: Any, name: str, *, maximum: int) -> int:
    """`value` when it is an integer 0..maximum (not a bool, not a float); ValueError naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}"[:200])
    if value < 0 or value > maximum:
        shown = value if abs(value) < 10**30 else f"a {len(str(abs(value)))}-digit number"
        raise ValueError(f"{name} must be between 0 and {maximum:,}, got {shown}")
    return value


# --- requests and responses --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    params: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes
    client: str
    max_json_depth: int = Limits.max_json_depth

    def json(self) -> Any:
        """The body as JSON (an empty body is `{}`); HttpError 400 when it is not acceptable."""
        return parse_json(self.body or b"{}", self.max_json_depth)


@dataclass(frozen=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, value: Any, status: int = 200) -> Response:
        return cls(status, json.dumps(value, allow_nan=False).encode() + b"\n")

    @classmethod
    def text(cls, text: str | bytes, status: int = 200, content_type: str = "text/plain; charset=utf-8") -> Response:
        return cls(status, text.encode() if isinstance(text, str) else text, content_type)

    @classmethod
    def error(cls, status: int, reason: str, headers: Mapping[str, str] | None = None) -> Response:
        return cls(
            status, json.dumps({"error": short(reason)}).encode() + b"\n", headers=tuple((headers or {}).items())
        )


def short(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """`text` cut to `limit` characters, saying how much was cut (error answers and log lines echo no more)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


Handler = Callable[[Request], Response]


@dataclass(frozen=True)
class Route:
    """`method` + `pattern` -> `handler`.  `{name}` in a pattern matches one path segment (`Request.params`);
    the pattern `*` matches every path.  `mutates`: the route changes state and needs the token when one is set."""

    method: str
    pattern: str
    handler: Handler
    mutates: bool = False
    max_body_bytes: int | None = None  # None: the service's Limits.max_body_bytes
    json_body: bool = False  # a body declared as anything but JSON is a 415 (no Content-Type: read as JSON)

    def match(self, path: str) -> dict[str, str] | None:
        if self.pattern == "*":
            return {}
        want = [p for p in self.pattern.split("/") if p]
        got = [p for p in path.split("/") if p]
        if len(want) != len(got):
            return None
        params = {}
        for w, g in zip(want, got, strict=True):
            if w.startswith("{") and w.endswith("}"):
                params[w[1:-1]] = g
            elif w != g:
                return None
        return params


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token_file(path: str) -> str:
    """The token a file holds (surrounding whitespace, e.g. the trailing newline, stripped); ValueError saying why
    when it cannot be read, is empty or is too large to be a token.  The token itself is never in the message."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TOKEN_BYTES + 1)
    except OSError as e:
        raise ValueError(f"token file {path}: cannot read: {e.strerror or type(e).__name__}") from None
    if len(raw) > MAX_TOKEN_BYTES:
        raise ValueError(f"token file {path}: over {MAX_TOKEN_BYTES} bytes: not a token")
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError(f"token file {path}: not UTF-8 text") from None
    if not token:
        raise ValueError(f"token file {path}: empty")
    return token


def resolve_token(*, file: str | None = None, env: str | None = None) -> str | None:
    """The one bearer token a listener uses; None when none is set.

    The service's own sources come first: the file `file` and the variable `env` (config keys).  Only when neither
    is set do the shared ones count: `INFERCAST_HTTP_TOKEN`, or the file `INFERCAST_HTTP_TOKEN_FILE` names.  Two
    sources of one rank set to different tokens is a ValueError naming them: which token wins is never a guess.
    The token itself is never in a message."""
    own: list[tuple[str, str]] = []
    if file:
        own.append((f"token file {file}", read_token_file(file)))
    if env and env != TOKEN_ENV and os.environ.get(env):
        own.append((f"${env}", os.environ[env]))
    shared: list[tuple[str, str]] = []
    if os.environ.get(TOKEN_ENV):
        shared.append((f"${TOKEN_ENV}", os.environ[TOKEN_ENV]))
    if os.environ.get(TOKEN_FILE_ENV):
        path = os.environ[TOKEN_FILE_ENV]
        shared.append((f"${TOKEN_FILE_ENV} ({path})", read_token_file(path)))
    for found in (own, shared):
        if len({t for _, t in found}) > 1:
            raise ValueError(f"the bearer token is set two ways ({', '.join(w for w, _ in found)}): set one")
        if found:
            return found[0][1]
    return None


def token_from_env(name: str = TOKEN_ENV) -> str | None:
    """`$name`, or else the content of the file `$INFERCAST_HTTP_TOKEN_FILE` names (ValueError when both are set
    or the file cannot be used)."""
    if name != TOKEN_ENV:
        return os.environ.get(name) or None
    return resolve_token()


# --- the server --------------------------------------------------------------------------------------------------
@dataclass
class _Conn:
    since: float
    waiting: bool = True  # waiting for (the rest of) a request: may be dropped to make room
    thread: threading.Thread | None = None


class _DeadlineReader(io.RawIOBase):
    """A socket reader that gives up at the handler's deadline (one deadline per request, not per recv)."""

    def __init__(self, sock: socket.socket, handler: _RequestHandler) -> None:
        self._sock = sock
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        remaining = self._handler.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("request not received within the read timeout")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buf)


class _RequestHandler(BaseHTTPRequestHandler):
    server: _Server  # type: ignore[assignment]
    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.1"  # every answer, errors on a garbled request line too, has a status line
    deadline = 0.0

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own reader: closed, or the socket's fd outlives the connection
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self), 64 * 1024)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s: %s " + format, self.server.service.name, self.address_string(), *args)

    # parse_request() reports a malformed request line or headers through send_error: make it JSON
    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        self.close_connection = True
        self._send(Response.error(code, message or self.responses.get(code, ("error",))[0]))

    def handle_one_request(self) -> None:
        service = self.server.service
        self.deadline = time.monotonic() + service.limits.read_timeout_seconds
        self.server.set_waiting(self.connection, True)
        # what send_response needs if the request line itself never arrives (parse_request sets them otherwise)
        self.command, self.requestline, self.request_version = "", "", "HTTP/1.1"
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline:
                self.close_connection = True
                return
            if len(self.raw_requestline) > 65536:
                self.send_error(414, "request line too long")
                return
            if not self.parse_request():
                return
            response = self._respond(service)
        except TimeoutError:
            self.close_connection = True
            self._send(Response.error(408, f"request not received within {service.limits.read_timeout_seconds:g}s"))
            return
        except (ConnectionError, OSError):
            self.close_connection = True
            return
        self._send(response)

    def _respond(self, service: HttpService) -> Response:
        path, _, query = self.path.partition("?")
        try:
            route, params = service.route(self.command, path)
            if route.mutates:
                service.authorize(self.headers.get("Authorization"))
            body = self._read_body(route.max_body_bytes or service.limits.max_body_bytes, route.json_body)
        except HttpError as e:
            self.close_connection = True  # the body (if any) was not read: the stream cannot be reused
            return Response.error(e.status, e.reason, e.headers)
        self.server.set_waiting(self.connection, False)
        req = Request(
            self.command,
            path,
            query,
            params,
            {k.lower(): v for k, v in self.headers.items()},
            body,
            self.client_address[0],
            service.limits.max_json_depth,
        )
        try:
            return route.handler(req)
        except HttpError as e:
            return Response.error(e.status, e.reason, e.headers)
        except Exception as e:  # a handler bug: an answer, a logged stack, and the listener stays up
            log.exception("%s: %s %s failed", service.name, self.command, path)
            return Response.error(500, f"internal error: {type(e).__name__}")

    def _read_body(self, limit: int, json_body: bool = False) -> bytes:
        lengths = self.headers.get_all("Content-Length") or []
        if self.headers.get("Transfer-Encoding"):
            raise HttpError(411, "chunked bodies are not accepted: send a Content-Length")
        if self.command not in BODY_METHODS:
            if any(v.strip() != "0" for v in lengths):
                raise HttpError(400, f"{self.command} takes no body")
            return b""
        if not lengths:
            raise HttpError(411, "Content-Length required")
        if len(set(lengths)) > 1:
            raise HttpError(400, f"conflicting Content-Length headers {[v[:20] for v in lengths[:5]]}")
        raw = lengths[0].strip()
        if not _DIGITS.fullmatch(raw):
            raise HttpError(400, f"Content-Length must be a decimal number of bytes, got {raw[:20]!r}")
        n = int(raw)
        if n > limit:
            raise HttpError(413, f"body of {n} bytes is over the {limit}-byte limit")
        if json_body:
            _check_json_type(self.headers.get("Content-Type"))
        body = self.rfile.read(n) if n else b""
        if len(body) != n:
            raise HttpError(400, f"body ended after {len(body)} of {n} bytes")
        return body

    def _send(self, r: Response) -> None:
        """Write the status line, headers and body in one write (an answer never arrives in pieces)."""
        phrase = self.responses.get(r.status, ("",))[0]
        headers = [
            f"HTTP/1.1 {r.status} {phrase}",
            "Server: infercast",
            f"Date: {self.date_time_string()}",
            f"Content-Type: {r.content_type}",
            f"Content-Length: {len(r.body)}",
            *(f"{k}: {v}" for k, v in r.headers),
        ]
        if self.close_connection:
            headers.append("Connection: close")
        data = ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1", "replace")
        if self.command != "HEAD":
            data += r.body
        try:
            self.connection.settimeout(self.server.service.limits.read_timeout_seconds)
            self.wfile.write(data)
            self.wfile.flush()
            self.log_request(r.status, len(r.body))
        except OSError:
            self.close_connection = True


def _check_json_type(header: str | None) -> None:
    """A body declared as anything but JSON is a 415 (`text/xml` is not parsed as JSON); none declared is JSON."""
    if header is None or not header.strip():
        return
    media = header.split(";", 1)[0].strip().lower()
    if media == "application/json" or (media.startswith("application/") and media.endswith("+json")):
        return
    raise HttpError(415, f"Content-Type must be application/json, got {media[:60]!r}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default backlog of 5 drops concurrent connects (clients retry after 1 s)

    def __init__(self, address: tuple[str, int], service: HttpService) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.service = service
        self._conns: dict[socket.socket, _Conn] = {}
        self._conns_lock = threading.Lock()
        self.dropped = 0  # connections dropped to make room (waiting longest)
        self.refused = 0  # connections answered 503 (every slot busy answering)
        super().__init__(address, _RequestHandler)

    def set_waiting(self, sock: socket.socket, waiting: bool) -> None:
        with self._conns_lock:
            c = self._conns.get(sock)
            if c is not None:
                if waiting and not c.waiting:
                    c.since = time.monotonic()
                c.waiting = waiting

    def connections(self) -> tuple[int, int]:
        """(open, busy): connections now, and those of them being answered (not waiting for a request)."""
        with self._conns_lock:
            return len(self._conns), sum(not c.waiting for c in self._conns.values())

    def process_request(self, request, client_address) -> None:  # type: ignore[override]
        victim: _Conn | None = None
        with self._conns_lock:
            if len(self._conns) >= self.service.limits.max_connections:
                waiting = [(c.since, s) for s, c in self._conns.items() if c.waiting]
                if not waiting:
                    self.refused += 1
                    self._refuse(request)
                    return
                _, sock = min(waiting, key=lambda x: x[0])
                victim = self._conns.pop(sock)
                self.dropped += 1
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # its thread sees EOF and ends
            conn = self._conns[request] = _Conn(time.monotonic())
        if victim is not None and victim.thread is not None:
            # wait (briefly) for it to end: a flood of connections cannot outrun the cap on threads
            victim.thread.join(timeout=1.0)
        conn.thread = threading.Thread(target=self.process_request_thread, args=(request, client_address), daemon=True)
        conn.thread.start()

    def process_request_thread(self, request, client_address) -> None:  # type: ignore[override]
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._conns_lock:
                self._conns.pop(request, None)

    def _refuse(self, request: socket.socket) -> None:
        body = b'{"error": "too many connections"}\n'
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        )
        try:
            request.settimeout(0.1)
            request.sendall(head.encode() + body)
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        # an exception escaped the request handler (socketserver would print a traceback to stderr): one log line
        log.warning("%s: connection from %s failed: %s", self.service.name, client_address[0], sys.exc_info()[1])
        log.debug("%s: connection failure", self.service.name, exc_info=True)


@dataclass
class HttpService:
    """Routes served on `host:port` (0: any free port) with the limits above; `start()` serves on a thread."""

    routes: Iterable[Route]
    host: str = "127.0.0.1"
    port: int = 0
    name: str = "infercast"
    limits: Limits = field(default_factory=Limits)
    token: str | object | None = FROM_ENV
    #: beyond loopback with no token, refuse the state-changing routes (403) instead of serving them open
    closed_off_loopback: bool = False

    def __post_init__(self) -> None:
        self.routes = tuple(self.routes)
        if self.token is FROM_ENV:
            self.token = token_from_env()
        self._server = _Server((self.host, self.port), self)
        self.port = self._server.server_address[1]
        self._thread: threading.Thread | None = None
        if not is_loopback(self.host):
            open_writes = [r.pattern for r in self.routes if r.mutates] if not self.token else []
            what = "are refused (403)" if self.closed_off_loopback else "change state with no token"
            log.warning(
                "%s: listening on %s:%d, reachable beyond this machine%s",
                self.name,
                self.host,
                self.port,
                f"; {', '.join(open_writes)} {what} (set {TOKEN_ENV} or {TOKEN_FILE_ENV})" if open_writes else "",
            )

    # --- used by the request handler ---------------------------------------------------------------------------
    def route(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        allowed = []
        for r in self.routes:  # type: ignore[union-attr]
            params = r.match(path)
            if params is None:
                continue
            if r.method == method or (method == "HEAD" and r.method == "GET"):
                return r, params
            allowed.append(r.method)
        if allowed:
            raise HttpError(405, f"{method} not allowed on {path[:100]}", {"Allow": ", ".join(sorted(set(allowed)))})
        raise HttpError(404, f"no such path {path[:100]!r}")

    def authorize(self, header: str | None) -> None:
        if not self.token:
            if self.closed_off_loopback and not is_loopback(self.host):
                raise HttpError(403, f"this listener is reachable beyond loopback and has no token: state-changing "
                                     f"requests are refused (set {TOKEN_ENV} or {TOKEN_FILE_ENV})")  # fmt: skip
            return
        scheme, _, given = (header or "").partition(" ")
        expected = str(self.token).encode()
        ok = scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected)
        if not ok:
            raise HttpError(401, "missing or wrong bearer token", {"WWW-Authenticate": 'Bearer realm="infercast"'})

    # --- lifecycle -----------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def stats(self) -> dict[str, int]:
        """Open and busy connections now, and connections dropped or refused so far (for tests and logs)."""
        s = self._server
        open_, busy = s.connections()
        return {"open": open_, "busy": busy, "dropped": s.dropped, "refused": s.refused}

    def start(self) -> HttpService:
        t = threading.Thread(target=self._server.serve_forever, name=f"{self.name}-http", daemon=True)
        t.start()
        self._thread = t  # only once running: `close` must never wait for a loop that was not started
        return self

    #: How long `close` waits for the serving loop to stop before it closes the socket under it anyway.
    CLOSE_WAIT_SECONDS = 5.0

    def close(self) -> None:
        """Stop serving and close the listening socket; never hangs.  `socketserver`'s `shutdown()` waits, with no
        bound, for a loop that may never have started (a Ctrl-C between creating its thread and starting it) or
        that missed the request: it is asked from a helper thread, and the loop is given `CLOSE_WAIT_SECONDS`."""
        t, self._thread = self._thread, None
        if t is not None and t.is_alive():
            threading.Thread(target=self._server.shutdown, name=f"{self.name}-shutdown", daemon=True).start()
            t.join(timeout=self.CLOSE_WAIT_SECONDS)
            if t.is_alive():
                log.warning("%s: the serving loop did not stop within %.0f s; closing its socket", self.name,
                            self.CLOSE_WAIT_SECONDS)  # fmt: skip
        self._server.server_close()

    def __enter__(self) -> HttpService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
