"""`--plot`: the actual series, each model's forecast at the horizon with its band, the threshold and breaches.

One panel per model, shared time axis.  The forecast made at origin o for o + h is drawn at o + h, so a model
that lags shows up as a curve shifted right of the actual one.  matplotlib with the Agg backend (no display).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from infercast.predictors.backtest import ModelRun
from infercast.predictors.base import History
from infercast.predictors.scoring import breach_starts


def plot_backtest(
    history: History,
    runs: dict[str, ModelRun],
    horizon_s: float,
    threshold: float | None,
    path: str | Path,
    title: str = "",
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, r in runs.items() if r.forecasts]
    fig, axes = plt.subplots(max(1, len(names)), 1, figsize=(11, 2.2 * max(1, len(names))), sharex=True, squeeze=False)
    t0 = history.t[0]
    starts = breach_starts(history.t, history.y, threshold) if threshold is not None else np.array([])
    for ax, name in zip(axes[:, 0], names or [""], strict=False):
        ax.plot((history.t - t0) / 60, history.y, color="black", lw=1.2, label="actual")
        run = runs.get(name)
        if run and run.forecasts:
            tt = (np.array([f.t[-1] for f in run.forecasts]) - t0) / 60
            yh = np.array([f.yhat[-1] for f in run.forecasts])
            lo = np.array([f.yhat_lower[-1] for f in run.forecasts])
            hi = np.array([f.yhat_upper[-1] for f in run.forecasts])
            ax.fill_between(tt, lo, hi, color="tab:blue", alpha=0.25, lw=0, label="band")
            ax.plot(tt, yh, color="tab:blue", lw=1.0, label=f"{name} at +{horizon_s:g}s")
        if threshold is not None:
            ax.axhline(threshold, color="tab:red", ls="--", lw=0.8)
        for c in starts:
            ax.axvline((c - t0) / 60, color="tab:red", alpha=0.6, lw=0.8)
        ax.set_ylabel(name, fontsize=8)
        ax.legend(loc="upper left", fontsize=7)
    axes[-1, 0].set_xlabel("minutes from series start")
    if title:
        axes[0, 0].set_title(title + (" (red: threshold and breach starts)" if threshold is not None else ""))
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
