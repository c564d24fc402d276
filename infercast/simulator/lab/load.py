"""Replay a trace's arrivals against the lab's proxy and time every request as the client sees it.

Token counts are scaled to the tiny model's context (`scale_tokens`): every request's prompt and output are
multiplied by one factor, so that the trace's 99th percentile of prompt + output fills `max_model_len`, then
clipped to fit it (at least one token each).  The ratios between requests, and between prompt and output, stay the
trace's.  Prompts are token ids (the OpenAI completions API takes them), so the engine holds exactly the prompt's
length; outputs are exact with `min_tokens` = `max_tokens` and `ignore_eos` (vLLM's sampling extensions).

Each request is streamed: its time to first token is when the first chunk arrives.  A request the proxy or the
engine answers with an error, or that breaks, is `failed`.  The client keeps up to `max_in_flight` requests open
(HAProxy queues what the engines do not take).
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import requests

from infercast.simulator.replay.traces import Trace


@dataclass(frozen=True)
class Planned:
    at_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass
class Outcome:
    planned: Planned
    sent_s: float = float("nan")
    ttft_s: float | None = None  # from sending to the first chunk
    done_s: float | None = None
    ok: bool = False
    error: str = ""


def scale_tokens(trace: Trace, max_model_len: int) -> tuple[list[Planned], float]:
    """The trace's requests with token counts scaled to fit `max_model_len`; (plan, the factor used)."""
    if len(trace) == 0:
        return [], 1.0
    total = trace.prompt_tokens + trace.output_tokens
    factor = (max_model_len - 1) / max(1.0, float(np.percentile(total, 99)))
    plan = []
    for t, p, o in zip(trace.arrivals_s, trace.prompt_tokens, trace.output_tokens, strict=True):
        pp = max(1, round(float(p) * factor))
        oo = max(1, round(float(o) * factor))
        if pp + oo > max_model_len - 1:  # the longest few: trimmed to fit, the prompt first
            pp = max(1, min(pp, max_model_len - 1 - oo))
            oo = max(1, max_model_len - 1 - pp)
        plan.append(Planned(float(t), pp, oo))
    return plan, factor


def _prompt(n: int, seed: int) -> list[int]:
    """`n` token ids of the tiny model's vocabulary (above its special tokens), different per request."""
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(3, 2000, n)]


def send(url: str, model: str, planned: Planned, seed: int, t0: float, timeout: float = 600.0) -> Outcome:
    out = Outcome(planned)
    body = {
        "model": model,
        "prompt": _prompt(planned.prompt_tokens, seed),
        "max_tokens": planned.output_tokens,
        "min_tokens": planned.output_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    start = time.monotonic()
    out.sent_s = start - t0
    try:
        with requests.post(f"{url}/v1/completions", json=body, stream=True, timeout=timeout) as r:
            if r.status_code != 200:
                out.error = f"HTTP {r.status_code}: {r.text[:200]}"
                return out
            # chunk_size None: each piece as it arrives (the default, 512 bytes, held the first token back until
            # about two more chunks had come, so TTFT read late and decode times near zero)
            for line in r.iter_lines(chunk_size=None):
                if not line.startswith(b"data:"):
                    continue
                if out.ttft_s is None:
                    out.ttft_s = time.monotonic() - start
                data = line[5:].strip()
                if data == b"[DONE]":
                    out.ok = True
                    break
                if b'"error"' in data and "error" in json.loads(data):
                    out.error = data.decode(errors="replace")[:200]
                    break
    except requests.RequestException as e:
        out.error = f"{type(e).__name__}: {e}"[:200]
    out.done_s = time.monotonic() - t0
    return out


def replay(
    url: str,
    model: str,
    plan: list[Planned],
    *,
    t0: float,
    stop: threading.Event | None = None,
    max_in_flight: int = 256,
) -> list[Outcome]:
    """Send each planned request at `t0 + at_s` (monotonic clock); returns when all have finished."""
    stop = stop or threading.Event()
    futures = []
    with ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="lab-client") as pool:
        for i, p in enumerate(plan):
            wait = t0 + p.at_s - time.monotonic()
            if wait > 0 and stop.wait(wait):
                break
            futures.append(pool.submit(send, url, model, p, i, t0))
    return [f.result() for f in futures]
