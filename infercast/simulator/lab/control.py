"""The lab's control loop's decisions: pure (what was observed and the time in, actions out).

The lever is admission at the proxy: `SetAdmission(memory_limit=m)`, which the HAProxy backend turns into each
engine's concurrency limit (m x the requests that fill its KV cache), so that what does not fit waits in HAProxy's
queue instead of being admitted and then preempted by the engine.  Three controls, on the same lever:

- `none`: never acts (the proxy admits everything, as shipped).
- `reactive`: tightens when the engines' KV usage, as Prometheus records it, reaches the memory breaker
  (`thresholds.memory_breaker`, 0.8): what an operator's threshold alert would trigger, without its `for:`.
- `predictive`: tightens when Alertmanager delivers infercast's predictive page (`InfercastKVCacheForecastBreach`).

Both release the limit (memory_limit 1.0) once the trigger has been clear for `release_seconds`.
"""

from __future__ import annotations

from dataclasses import dataclass

from infercast.actuators.actions import Action, SetAdmission

CONTROLS = ("none", "reactive", "predictive")
PAGE_ALERT = "InfercastKVCacheForecastBreach"


@dataclass(frozen=True)
class Observed:
    at_s: float
    kv_max: float | None  # the fullest engine's KV usage, from Prometheus (None: not known yet)
    page_firing: bool  # Alertmanager has delivered the predictive page and not its resolution


@dataclass(frozen=True)
class ControlState:
    limited: bool = False
    clear_since_s: float | None = None


@dataclass(frozen=True)
class Policy:
    control: str
    memory_limit: float = 0.9
    breaker: float = 0.8
    release_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.control not in CONTROLS:
            raise ValueError(f"control must be one of {CONTROLS}, got {self.control!r}")
        if not 0 < self.memory_limit < 1:
            raise ValueError(f"memory_limit must be in (0, 1), got {self.memory_limit}")

    def triggered(self, obs: Observed) -> bool:
        if self.control == "predictive":
            return obs.page_firing
        if self.control == "reactive":
            return obs.kv_max is not None and obs.kv_max >= self.breaker
        return False

    def decide(self, obs: Observed, state: ControlState) -> tuple[list[Action], ControlState]:
        """(the actions to take now, the state after them)."""
        if self.control == "none":
            return [], state
        if self.triggered(obs):
            if not state.limited:
                return [SetAdmission(memory_limit=self.memory_limit)], ControlState(True, None)
            return [], ControlState(True, None)
        if not state.limited:
            return [], state
        clear = obs.at_s if state.clear_since_s is None else state.clear_since_s
        if obs.at_s - clear >= self.release_seconds:
            return [SetAdmission(memory_limit=1.0)], ControlState(False, None)
        return [], ControlState(True, clear)
