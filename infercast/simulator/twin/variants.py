"""Named variants of the shipped scenarios: the same fleet and traffic with one thing changed, so a comparison
isolates it.  `load_scenario(name)` returns the fleet config; `infercast twin run --scenario NAME` and the control
bench (`bench/control.py`) read them by name.

- `flash-sale-unannounced`: seed 000's flash sale with an empty event calendar.  The surge is the same; nothing
  tells the forecasters or the `scheduled` arm it is coming, so what a forecast arm gains over `reactive` here is
  the forecast's own (the calendar's share of the gain on the announced sale is what this variant removes).
- `calm-day`: the flash-sale fleet with its regular customers only (200 req/s, the pre-sale mix) and no event: there
  is nothing to act on, so every action is a false one and every extra GPU-second a cost.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from infercast.config import ConfigError, FleetConfig, load_config, resolve_scenario


def _unannounced(cfg: FleetConfig) -> FleetConfig:
    return cfg.model_copy(update={"events": (), "name": f"{cfg.name}-unannounced"})


def _calm(cfg: FleetConfig) -> FleetConfig:
    sc = cfg.scenario.model_copy(update={"streams": ()})
    return cfg.model_copy(update={"events": (), "scenario": sc, "name": "calm-day"})


#: name -> (the shipped scenario it changes, the change, why: one line)
VARIANTS: dict[str, tuple[str, Callable[[FleetConfig], FleetConfig], str]] = {
    "flash-sale-unannounced": ("flash-sale", _unannounced, "the flash sale with an empty calendar"),
    "calm-day": ("flash-sale", _calm, "the flash-sale fleet with its regular 200 req/s only, no event"),
}


def load_scenario(name_or_path: str | Path) -> FleetConfig:
    """A shipped scenario (`flash-sale`), a variant of one (`VARIANTS`) or a fleet file's path."""
    if str(name_or_path) in VARIANTS:
        base, change, _ = VARIANTS[str(name_or_path)]
        return change(load_config(resolve_scenario(base)))
    try:
        path = resolve_scenario(str(name_or_path))
    except ConfigError as e:  # name the variants too
        raise ConfigError(f"{e}; variants: {', '.join(VARIANTS)}") from None
    return load_config(path)


__all__ = ["VARIANTS", "load_scenario"]
