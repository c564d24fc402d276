"""Test-only: vLLM engines on loopback serving the real vLLM 0.34 payloads of tests/data/engines (see its README for
where they come from), with every counter and histogram sample grown in proportion to time, so that `rate()` and
`histogram_quantile()` over them give finite, steady values (the quantiles of the fixture's buckets).

`vllm.prom` is `chat-v4` (multiprocess mode, engines "0" and "1"), `vllm-chat-v3.5.prom` is `chat-v3.5`
(single-process mode, with `_created` series): the model names of examples/flash-sale.yaml's versions v4 and v3.5.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "engines"
#: payload file -> the served model name in it
PAYLOADS = {"vllm.prom": "chat-v4", "vllm-chat-v3.5.prom": "chat-v3.5"}
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_GROWING = ("_bucket", "_count", "_sum", "_total")


def grown(text: str, factor: float) -> str:
    """`text` with every counter-like sample (histogram buckets, counts and sums; `_total` counters) times
    `factor`; gauges and `_created` timestamps unchanged."""
    out = []
    for line in text.splitlines():
        m = _NAME.match(line)
        if m is None or not m.group(0).endswith(_GROWING):
            out.append(line)
            continue
        head, value = line.rsplit(" ", 1)
        out.append(f"{head} {float(value) * factor!r}")
    return "\n".join(out) + "\n"


class FakeEngine:
    """One engine's /metrics at a loopback port: the payload grown by 1 + (seconds since start) / 60."""

    def __init__(self, payload: str, clock: Callable[[], float] = time.time) -> None:
        text = (DATA / payload).read_text()
        start = clock()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = grown(text, 1 + (clock() - start) / 60).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def scrape_job(job: str, targets: list[str], labels: dict[str, str]) -> str:
    """A `scrape_configs` entry (to append to infercast.servers.prometheus_config's text) scraping the engines
    as Prometheus scrapes a pod: the engine's own labels kept, `labels` added as target labels (what a PodMonitor's
    relabelling adds: namespace, and cluster where a multi-cluster setup sets it)."""
    quoted = ", ".join(f"'{t}'" for t in targets)
    extra = ", ".join(f"{k}: {v}" for k, v in labels.items())
    return f"  - job_name: {job}\n    static_configs: [{{targets: [{quoted}], labels: {{{extra}}}}}]\n"
