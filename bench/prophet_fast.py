"""Prophet's forecast after a fit, through `Prophet.predict` and through the fitted plan (issue 25 item 1).

    nice -n 10 .venv/bin/python bench/prophet_fast.py [--series 20] [--repeat 20]

For each history shape the service meets (6 h of 15 s samples, its default; 8 days of 600 s windows), `--series`
daily-shaped series are fitted once; then each forecaster forecasts 300 s (6h@15s) or 600 s (8d@600s) ahead
`--repeat` times per series through both paths, in this run: Prophet as it is (`prophet`, its 200-draw band) and the
anchored model (`prophet_anchored`, the service's traffic model until issue 27 and one setting away since, which
asks Prophet for the newest samples and the horizon).  Prints
ms/forecast for each path, their ratio, and the largest difference of the point forecasts (the bands are random
draws: the same seed gives the same band, which tests/predictors/test_prophet.py checks).  Nothing is published.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _time(fn, repeat: int) -> float:
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def measure(n_series: int, repeat: int) -> list[dict]:
    from infercast.predictors.anchored import AnchoredProphet
    from infercast.predictors.base import History
    from infercast.predictors.prophet_model import ProphetForecaster

    rng = np.random.default_rng(0)
    rows = []
    for label, step, n, horizon in (("6h@15s", 15.0, 1440, 300.0), ("8d@600s", 600.0, 1152, 600.0)):
        t = np.arange(n) * step
        hs = [
            History(t, 100 * (1 + 0.5 * np.sin(2 * np.pi * t / 86400 + i)) + rng.normal(0, 5, n))
            for i in range(n_series)
        ]
        for name in ("prophet", "prophet_anchored"):
            slow_s = fast_s = diff = 0.0
            for h in hs:
                p = ProphetForecaster(refit_growth=None)
                m = p if name == "prophet" else AnchoredProphet(prophet=p)
                m.fit([h])
                plan = p.plan_
                fast_s += _time(lambda m=m, h=h, horizon=horizon: m.forecast(h, horizon), repeat)
                a = m.forecast(h, horizon).yhat
                p.plan_ = None  # Prophet's own predict from here
                slow_s += _time(lambda m=m, h=h, horizon=horizon: m.forecast(h, horizon), repeat)
                b = m.forecast(h, horizon).yhat
                p.plan_ = plan
                diff = max(diff, float(np.max(np.abs(a - b))))
            row = {
                "history": label,
                "model": name,
                "series": n_series,
                "predict_ms_per_forecast": round(1000 * slow_s / n_series, 3),
                "plan_ms_per_forecast": round(1000 * fast_s / n_series, 3),
                "speedup": round(slow_s / fast_s, 1),
                "max_abs_diff_yhat": diff,
            }
            rows.append(row)
            print(
                f"{label:8s} {name:17s} Prophet.predict {row['predict_ms_per_forecast']:7.3f} ms/forecast, plan "
                f"{row['plan_ms_per_forecast']:6.3f} ms/forecast: {row['speedup']:5.1f}x faster; largest yhat "
                f"difference {diff:.2e}",
                flush=True,
            )
    return rows


def main() -> int:
    sys.path.insert(0, str(ROOT))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--series", type=int, default=20)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--json", action="store_true", help="print the rows as JSON too")
    a = p.parse_args()
    rows = measure(a.series, a.repeat)
    if a.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
