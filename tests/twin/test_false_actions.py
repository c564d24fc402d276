"""bench/control.py's `false_actions`: a protective action after which the reactive run of the same seed never
reaches the trigger within the horizon counts as false; a step back (a scale-down, an admission limit raised again,
a weight moved back toward the pool's own) is not protective and never counts.  The predictive arm used to be
charged a false action for restoring memory admission from 0.75 to 0.8 when a surge was over."""

from __future__ import annotations

import pandas as pd

from bench.control import false_actions
from infercast.config import load_config
from infercast.simulator.twin.layout import protected_layout

from ..conftest import REPO


def test_steps_back_are_not_false_actions_and_protections_in_a_calm_future_are():
    cfg = load_config(REPO / "examples" / "flash-sale.yaml")
    horizon = cfg.predictor.horizon_seconds
    # the reactive run is hot (0.9) until 600 s, calm (0.3) after
    ts = pd.DataFrame({"t": [float(t) for t in range(0, 3600, 5)], "pool": "v4-short"})
    ts["kv_usage_max"] = [0.9 if t < 600 else 0.3 for t in ts["t"]]
    pool = "v4-short"
    base = float(protected_layout(cfg).pools[pool].weight)

    def act(t, action, **fields):
        return {"t": float(t), "event": "action", "action": action, **fields}

    back_after_the_surge = [
        act(100, "set_admission", memory_limit=0.75, max_context_tokens=8192),  # before a hot minute: not false
        act(100, "scale_pool", pool=pool, replicas=11),
        act(100, "set_pool_weight", pool=pool, weight=base / 2),
        act(1000, "set_admission", memory_limit=0.8, max_context_tokens=32768),  # restored: a step back
        act(1000, "scale_pool", pool=pool, replicas=7),  # down
        act(1000, "set_pool_weight", pool=pool, weight=base),  # back to its own
        act(1000, "set_admission", normal_queue_seconds=2.0),  # gateway waits alone
    ]
    assert false_actions(back_after_the_surge, ts, cfg) == 0
    # the same protections taken in the calm hour are false, one each
    calm = [
        act(2000, "set_admission", memory_limit=0.75),
        act(2000, "scale_pool", pool=pool, replicas=11),
        act(2000, "set_pool_weight", pool=pool, weight=base / 2),
        act(2000, "prewarm_pool", pool=pool),
    ]
    assert false_actions(calm, ts, cfg) == 4
    assert horizon < 1400, "the calm protections are over an horizon after the hot minute"
