"""Where the twin's requests come from: a scenario (phases of rate and long-context share) or a real trace.

Both hand the router, each tick, the requests first sent in `[t0, t1)` as one `Requests` cohort.  Pure given the
random generator: the same seed gives the same arrivals.
"""

from __future__ import annotations

import itertools
from typing import Protocol

import numpy as np

from infercast.config import LengthDistribution, ScenarioConfig
from infercast.twin.requests import PRIORITY_NAMES, Requests

LONG_CONTEXT_TOKENS = 8192  # the seeds' ">8k" class


class Traffic(Protocol):
    duration_s: float

    def arrivals(self, t0: float, t1: float) -> Requests: ...

    def rate_at(self, t: float) -> float:
        """Offered requests/s around t (the oracle reads the future from here)."""
        ...

    def long_share_at(self, t: float) -> float: ...


def _priorities(n: int, shares: dict[str, float], rng: np.random.Generator) -> np.ndarray:
    p = np.array([shares.get(name, 0.0) for name in PRIORITY_NAMES])
    return rng.choice(3, size=n, p=p / p.sum()).astype(np.int8)


def sample_lengths(
    n: int, long_share: float, lengths: LengthDistribution, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths: a lognormal mix of short (<= 8k) and long (> 8k) prompts."""
    is_long = rng.random(n) < long_share
    prompt = np.empty(n, dtype=np.int64)
    n_long = int(is_long.sum())
    short = rng.lognormal(np.log(lengths.short_median_tokens), lengths.sigma, n - n_long)
    prompt[~is_long] = np.clip(short, 16, min(lengths.short_max_tokens, LONG_CONTEXT_TOKENS)).astype(np.int64)
    long = rng.lognormal(np.log(lengths.long_median_tokens), lengths.long_sigma, n_long)
    prompt[is_long] = np.clip(long, LONG_CONTEXT_TOKENS + 1, lengths.long_max_tokens).astype(np.int64)
    out = rng.lognormal(np.log(lengths.output_median_tokens), lengths.sigma, n)
    out = np.clip(out, 1, min(lengths.output_max_tokens, lengths.request_max_tokens)).astype(np.int64)
    return prompt, out


class ScenarioTraffic:
    """Poisson arrivals whose rate and long-context share follow the scenario's phases (linear ramps)."""

    def __init__(self, scenario: ScenarioConfig, priority_shares: dict[str, float], rng: np.random.Generator) -> None:
        self.scenario = scenario
        self.duration_s = scenario.duration_seconds
        self.shares = priority_shares
        self.rng = rng
        self.lengths = scenario.lengths

    def _phase_value(self, t: float, attr: str) -> float:
        phases = self.scenario.phases
        value = getattr(phases[0], attr)
        for ph in phases[1:]:
            if t < ph.start_seconds:
                break
            target = getattr(ph, attr)
            ramp = ph.ramp_seconds
            if attr == "long_share" and ph.long_ramp_seconds is not None:
                ramp = ph.long_ramp_seconds
            # ramp from wherever the previous phases had got to, to this phase's value
            frac = 1.0 if ramp <= 0 else min(1.0, (t - ph.start_seconds) / ramp)
            value = value + (target - value) * frac
        return float(value)

    def rate_at(self, t: float) -> float:
        return self._phase_value(t, "rps")

    def long_share_at(self, t: float) -> float:
        return self._phase_value(t, "long_share")

    def surge_start(self) -> float | None:
        """Start of the first phase whose rate exceeds the one before (the scenario's surge), if any."""
        phases = self.scenario.phases
        for prev, ph in itertools.pairwise(phases):
            if ph.rps > prev.rps:
                return ph.start_seconds
        return None

    def arrivals(self, t0: float, t1: float) -> Requests:
        mid = 0.5 * (t0 + t1)
        n = int(self.rng.poisson(self.rate_at(mid) * (t1 - t0)))
        if n == 0:
            return Requests.empty()
        t = np.sort(self.rng.uniform(t0, t1, n))
        prompt, out = sample_lengths(n, self.long_share_at(mid), self.lengths, self.rng)
        max_tokens = np.full(n, self.lengths.request_max_tokens, dtype=np.int64)
        return Requests(
            t,
            t.copy(),
            prompt,
            out,
            max_tokens,
            _priorities(n, self.shares, self.rng),
            np.ones(n, dtype=np.int8),
            np.zeros(n, dtype=bool),
            t.copy(),
        )


class TraceTraffic:
    """Arrivals replayed from a trace (`infercast.traces.Trace`: arrivals_s, prompt_tokens, output_tokens)."""

    def __init__(
        self, trace, priority_shares: dict[str, float], rng: np.random.Generator, request_max_tokens: int = 512
    ) -> None:
        self.trace = trace
        self.t = np.asarray(trace.arrivals_s, dtype=np.float64)
        self.prompt = np.asarray(trace.prompt_tokens, dtype=np.int64)
        self.out = np.maximum(np.asarray(trace.output_tokens, dtype=np.int64), 1)
        self.duration_s = float(getattr(trace, "duration_s", self.t[-1] if len(self.t) else 0.0))
        self.shares = priority_shares
        self.rng = rng
        self.max_tokens = np.maximum(self.out, request_max_tokens)
        self._window = 60.0

    def arrivals(self, t0: float, t1: float) -> Requests:
        i0, i1 = np.searchsorted(self.t, [t0, t1], side="left")
        n = int(i1 - i0)
        if n == 0:
            return Requests.empty()
        t = self.t[i0:i1]
        return Requests(
            t.copy(),
            t.copy(),
            self.prompt[i0:i1].copy(),
            self.out[i0:i1].copy(),
            self.max_tokens[i0:i1].copy(),
            _priorities(n, self.shares, self.rng),
            np.ones(n, dtype=np.int8),
            np.zeros(n, dtype=bool),
            t.copy(),
        )

    def rate_at(self, t: float) -> float:
        w = self._window
        i0, i1 = np.searchsorted(self.t, [t - w / 2, t + w / 2])
        return float(i1 - i0) / w

    def long_share_at(self, t: float) -> float:
        w = self._window
        i0, i1 = np.searchsorted(self.t, [t - w / 2, t + w / 2])
        if i1 <= i0:
            return 0.0
        return float(np.mean(self.prompt[i0:i1] > LONG_CONTEXT_TOKENS))
