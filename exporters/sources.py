"""Sources the exporter scrapes: HTTP `/metrics` endpoints (engines, dcgm-exporter) behind one small protocol.

A source has a `name`, a `kind` (the catalog's `target_up` kinds) and `collect() -> list[Sample]`, which raises
`ScrapeError` with a one-line reason when the target cannot be read or trusted.  `now()` is the clock its
windowed ratios run on (wall time here; simulated time for the twin).

An HTTP source parses the body as it arrives (`stream` -> `TextParser`): it never holds a whole page, and the
scrape's one deadline and series cap (`Budget`) stop the read *and* the parse in the scraping thread itself, so an
abandoned scrape does not go on using CPU and memory in the background.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import time
from collections.abc import Callable
from typing import Protocol

import requests

from infercast.exporters import dcgm, sglang, tgi, trtllm, vllm
from infercast.exporters.base import MAX_SERIES, Budget, Sample, ScrapeError, Target, TextParser, diagnostics
from infercast.redact import redact

#: kind -> its collector module (`WANTED`, `MAXIMA`, `build`, `parse`)
MODULES = {"vllm": vllm, "sglang": sglang, "tgi": tgi, "trtllm": trtllm, "dcgm": dcgm}
PARSERS: dict[str, Callable[[str, Target], list[Sample]]] = {kind: m.parse for kind, m in MODULES.items()}
SERVING_KINDS = frozenset({"vllm", "sglang", "tgi", "trtllm", "twin"})
_CHUNK = 64 * 1024


class Source(Protocol):
    name: str
    kind: str

    def collect(self) -> list[Sample]: ...

    def now(self) -> float: ...


def stream(url: str, session: requests.Session, timeout: float, max_bytes: int, deadline: float | None = None):
    """GET a /metrics body within `timeout` seconds and `max_bytes` bytes, yielding it chunk by chunk (decoded from
    gzip); ScrapeError says why not.

    Redirects are not followed (a scrape target that redirects is misconfigured, and following could leave
    loopback); the body is read as it arrives so that a server dribbling bytes hits the deadline too.
    """
    deadline = deadline if deadline is not None else time.monotonic() + timeout
    try:
        with session.get(
            url,
            timeout=(timeout, timeout),
            stream=True,
            allow_redirects=False,
            headers={"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "gzip, identity"},
        ) as r:
            if r.is_redirect or 300 <= r.status_code < 400:
                location = redact(r.headers.get("Location", "?"))[:200]
                raise ScrapeError(f"HTTP {r.status_code} redirect to {location!r} (not followed)")
            if r.status_code != 200:
                raise ScrapeError(f"HTTP {r.status_code} {r.reason or ''}"[:200].strip())
            declared = r.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise ScrapeError(f"body of {declared} bytes is over the {max_bytes}-byte limit")
            size = 0
            while True:
                chunk = r.raw.read1(_CHUNK, decode_content=True)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise ScrapeError(f"body over the {max_bytes}-byte limit")
                if time.monotonic() > deadline:
                    raise ScrapeError(f"timed out after {timeout:g}s")
                yield chunk
    except ScrapeError:
        raise
    except requests.Timeout:
        raise ScrapeError(f"timed out after {timeout:g}s") from None
    except requests.ConnectionError as e:
        raise ScrapeError(f"connection failed: {_short(e)}") from None
    except (requests.RequestException, OSError, ValueError) as e:
        raise ScrapeError(f"request failed: {_short(e)}") from None
    except Exception as e:  # urllib3 decode errors and the like: never crash a scrape
        raise ScrapeError(f"request failed: {type(e).__name__}: {_short(e)}") from None


_ERRNO = re.compile(r"\[Errno -?\d+\][^'\")]*")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _short(e: BaseException) -> str:
    """A stable one-line reason (no object addresses), so that the same failure is logged once, not every cycle."""
    text = str(e) or type(e).__name__
    errno = _ERRNO.search(text)
    if errno:
        return errno.group(0).strip()
    text = redact(_ADDRESS.sub("", text))
    return text if len(text) <= 200 else text[:200] + "..."


class HttpSource:
    """One engine or dcgm-exporter endpoint: fetch its /metrics, then the kind's pure parser."""

    def __init__(
        self,
        target: Target,
        timeout: float,
        max_bytes: int,
        session: requests.Session | None = None,
        max_series: int = MAX_SERIES,
    ):
        if target.kind not in MODULES:
            raise ValueError(f"no HTTP parser for target kind {target.kind!r}")
        if not target.url:
            raise ValueError(f"target {target.name!r} has no url")
        self.target = target
        self.name = target.name
        self.kind = target.kind
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.session = session or requests.Session()
        self.max_series = max_series
        self._module = MODULES[target.kind]

    def collect(self) -> list[Sample]:
        """The page's samples, then the diagnostics (`infercast.exporters.base.diagnostics`): expected families missing,
        and families dropped as malformed (the rest of the page is kept).  ScrapeError when nothing can be used."""
        deadline = time.monotonic() + self.timeout
        mod = self._module
        parser = TextParser(mod.WANTED, mod.MAXIMA, Budget(deadline, self.timeout, self.max_series), isolate=True)
        try:
            chunks = stream(self.target.url or "", self.session, self.timeout, self.max_bytes, deadline)
            with contextlib.closing(chunks):
                for chunk in chunks:
                    parser.feed_bytes(chunk)
            raw = parser.result()
            try:
                if "errors" in inspect.signature(mod.build).parameters:
                    samples = mod.build(raw, self.target, errors=parser.errors)
                else:
                    samples = mod.build(raw, self.target)
            except ScrapeError as e:
                if not parser.errors:
                    raise
                dropped = "; ".join(f"{fam} dropped: {why}" for fam, why in sorted(parser.errors.items()))
                raise ScrapeError(f"{e} ({dropped})"[:600]) from None
            return samples + diagnostics(getattr(mod, "EXPECTED", ()), raw, parser.errors)
        except ScrapeError:
            raise
        except Exception as e:  # a parser bug must not take the exporter down; it is reported as the reason
            raise ScrapeError(f"could not interpret the body: {type(e).__name__}: {_short(e)}") from None

    def now(self) -> float:
        return time.monotonic()
