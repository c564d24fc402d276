"""Why the loop reads a surge due after the surge has passed (a diagnostic, not a scored bench).

    .venv/bin/python bench/band_after_surge.py                     # Azure code surge, held-apart seed 702, last-value
    .venv/bin/python bench/band_after_surge.py --scenario mooncake-surge --seed 701 --arm predictive --pool v4-long

Runs one `bench/control.py` scenario under a loop arm and prints, at every forecast of the pool's traffic, what
the loop reads: the traffic now, the inner model's upper band at its peak over the horizon, the online calibration's
factor on the upper half-width (`AdaptiveBand`), the upper band it publishes, and whether the loop judges a surge
due (`actuators/inputs.py`: the published upper band at or over `policy.traffic_surge_factor` times the traffic
now, and the traffic now above 0), how many forecasts judge one due before, during and after the scenario's surge,
and the arm's applied admission decisions with their reasons.  docs/control.md
reads seed 702's figures: held-apart, never scored.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import control as cb  # noqa: E402
import numpy as np  # noqa: E402

from infercast.actuators.inputs import surge_due  # noqa: E402
from infercast.predictors import conformal, service  # noqa: E402
from infercast.simulator.control.driver import run_arm  # noqa: E402


def traced_traffic_bands(pool: str) -> list[tuple]:
    """Wrap the predictor so that every traffic forecast of `pool` is recorded: (t, now, inner upper peak, factor,
    published upper peak).  The models are tagged with their series when the service makes them."""
    rows: list[tuple] = []
    make, forecast = service.PredictorLoop._model, conformal.AdaptiveBand.forecast

    def tagged(self, key, kind, group):
        sm = make(self, key, kind, group)
        sm.model._traced = kind == "rps" and pool in str(group)
        return sm

    def recorded(self, history, horizon_s):
        if not getattr(self, "_traced", False):
            return forecast(self, history, horizon_s)
        seen = {}
        inner = self.inner.forecast

        def inner_recorded(h, hs):
            fc = inner(h, hs)
            seen["upper"] = float(np.max(fc.yhat_upper))
            return fc

        self.inner.forecast = inner_recorded
        try:
            out = forecast(self, history, horizon_s)
        finally:
            del self.inner.forecast
        factor = float(np.exp(self.log_up))
        rows.append((float(history.t[-1]), float(history.y[-1]), seen["upper"], factor, float(np.max(out.yhat_upper))))
        return out

    service.PredictorLoop._model = tagged
    conformal.AdaptiveBand.forecast = recorded
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="azure-code-surge")
    p.add_argument("--seed", type=int, default=702)
    p.add_argument("--arm", default="last-value")
    p.add_argument("--pool", default="v4-main-short")
    p.add_argument("--traces", type=Path, default=ROOT / "tests" / "data" / "traces")
    a = p.parse_args()
    sc = next(s for s in cb.SCENARIOS if s.name == a.scenario)
    cfg, trace = cb.load(sc, a.traces, a.seed)
    surge = cfg.policy.traffic_surge_factor
    rows = traced_traffic_bands(a.pool)
    r = run_arm(cfg, a.arm, a.seed, trace, None)
    print(f"{a.scenario}, seed {a.seed}, {a.arm}, pool {a.pool}'s traffic (req/s); surge factor {surge:g}")
    print(f"{'t s':>6} {'now':>8} {'inner upper':>12} {'factor':>7} {'published':>10}  surge due")
    # how often the loop reads a surge due, before, during and after the scenario's surge (a trigger that reads one
    # due at nearly every forecast is an "always" trigger: it tells the loop nothing about when)
    start, seconds = (sc.surges[0][0], sc.surges[0][1]) if sc.surges else (float("inf"), 0.0)
    parts = {"before the surge": [], "during it": [], "after it": []}
    for t, now, inner_up, factor, upper in rows:
        due = surge_due(now, upper, surge)  # the loop's own judgement (actuators/inputs.py)
        print(f"{t:6.0f} {now:8.1f} {inner_up:12.1f} {factor:7.2f} {upper:10.1f}  {'yes' if due else ''}")
        part = "before the surge" if t < start else "during it" if t < start + seconds else "after it"
        parts[part].append(due)
    print("surge judged due: " + "; ".join(f"{k} {sum(v)} of {len(v)} forecasts" for k, v in parts.items() if v))
    print("admission decisions applied:")
    for e in r.events:
        if e.get("outcome") == "applied" and e.get("action") in ("set_admission", "set_rate_limit"):
            print(f"{e['t']:6.0f} {e['action']}: {e.get('reason', '')}")
    print(f"urgent goodput {r.summary.get('urgent_goodput_rps')} req/s")


if __name__ == "__main__":
    main()
