"""Where the twin's requests come from: a scenario (phases of rate and long-context share) or a real trace.

Both hand the router, each tick, the requests first sent in `[t0, t1)` as one `Requests` cohort.  Pure given the
random generator: the same seed gives the same arrivals.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from infercast.config import LengthDistribution, ScenarioConfig
from infercast.simulator.twin.requests import PRIORITY_NAMES, Requests

LONG_CONTEXT_TOKENS = 8192  # the seeds' ">8k" class


class Traffic(Protocol):
    duration_s: float

    def arrivals(self, t0: float, t1: float) -> Requests: ...

    def rate_at(self, t: float) -> float:
        """Offered requests/s around t (perfect-forecast and hindsight read the future from here)."""
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


class _Stream:
    """One stream of a scenario: phases of rate and long-context share (linear ramps), its lengths and classes."""

    def __init__(self, phases, lengths: LengthDistribution, shares: dict[str, float], tenant: int, malformed: bool):
        self.phases = phases
        self.lengths = lengths
        self.shares = shares
        self.tenant = tenant
        self.malformed = malformed
        # mean prompt tokens of its short (<= 8k) and long prompts (a fixed sample: the same for every seed)
        rng = np.random.default_rng(20_251_203)
        self.mean_short = float(sample_lengths(4096, 0.0, lengths, rng)[0].mean())
        self.mean_long = float(sample_lengths(4096, 1.0, lengths, rng)[0].mean())

    def value(self, t: float, attr: str) -> float:
        phases = self.phases
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

    def arrivals(self, t0: float, t1: float, rng: np.random.Generator) -> Requests:
        mid = 0.5 * (t0 + t1)
        n = int(rng.poisson(self.value(mid, "rps") * (t1 - t0)))
        if n == 0:
            return Requests.empty()
        t = np.sort(rng.uniform(t0, t1, n))
        prompt, out = sample_lengths(n, self.value(mid, "long_share"), self.lengths, rng)
        max_tokens = np.full(n, self.lengths.request_max_tokens, dtype=np.int64)
        prio = _priorities(n, self.shares, rng)
        return Requests.new(t, prompt, out, max_tokens, prio, self.tenant, self.malformed)


class ScenarioTraffic:
    """Poisson arrivals of the scenario's streams: the top-level phases (tenant 0) plus each of `streams`."""

    def __init__(self, scenario: ScenarioConfig, priority_shares: dict[str, float], rng: np.random.Generator) -> None:
        self.scenario = scenario
        self.duration_s = scenario.duration_seconds
        self.shares = priority_shares
        self.rng = rng
        self.lengths = scenario.lengths
        self.streams = [_Stream(scenario.phases, scenario.lengths, priority_shares, 0, False)]
        for i, st in enumerate(scenario.streams, start=1):
            self.streams.append(
                _Stream(
                    st.phases, st.lengths or scenario.lengths, st.priority_shares or priority_shares, i, st.malformed
                )
            )
        self.stream_names = scenario.stream_names

    def rate_at(self, t: float) -> float:
        return sum(s.value(t, "rps") for s in self.streams)

    def long_share_at(self, t: float) -> float:
        rates = [s.value(t, "rps") for s in self.streams]
        total = sum(rates)
        if total <= 0:
            return 0.0
        return sum(r * s.value(t, "long_share") for r, s in zip(rates, self.streams, strict=True)) / total

    def token_rate_at(self, t: float, short: bool = True, long: bool = True) -> float:
        """Prompt tokens per second offered at t, of short (<= 8k) prompts, long ones, or both."""
        out = 0.0
        for s in self.streams:
            share = s.value(t, "long_share")
            out += s.value(t, "rps") * ((1 - share) * s.mean_short * short + share * s.mean_long * long)
        return out

    def _phase_starts(self) -> list[float]:
        return sorted({ph.start_seconds for s in self.streams for ph in s.phases})

    def surge_start(self) -> float | None:
        """The first phase start at which the total rate starts to climb (the scenario's surge), if any."""
        for t in self._phase_starts():
            if t > 0 and self.rate_at(t + 1.0) > self.rate_at(t - 1e-6) * 1.05:
                return t
        return None

    def surge_end(self) -> float | None:
        """When the total rate is back at or below its pre-surge level after the surge, if it comes back."""
        start = self.surge_start()
        if start is None:
            return None
        before = self.rate_at(start - 1e-6)
        starts = [t for t in self._phase_starts() if t > start]
        for t in starts:
            ramp = max((ph.ramp_seconds for s in self.streams for ph in s.phases if ph.start_seconds == t), default=0.0)
            if self.rate_at(t + ramp) <= before * 1.05:
                return t + ramp
        return None

    def arrivals(self, t0: float, t1: float) -> Requests:
        return Requests.concat([s.arrivals(t0, t1, self.rng) for s in self.streams])


class TraceTraffic:
    """Arrivals replayed from a trace (`infercast.simulator.replay.traces.Trace`: arrivals_s, prompt_tokens,
    output_tokens)."""

    stream_names = ("trace",)

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
        prio = _priorities(n, self.shares, self.rng)
        return Requests.new(t, self.prompt[i0:i1].copy(), self.out[i0:i1].copy(), self.max_tokens[i0:i1].copy(), prio)

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
