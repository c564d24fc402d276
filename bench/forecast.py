"""Forecasting benchmark: the backtest table on the real traces, Prophet on ServeGen, Prophet's refit cost.

    nice -n 10 .venv/bin/python bench/forecast.py --traces /work/shared/traces [--json OUT] [--skip-kv] ...

1. KV usage, 300 s ahead (`infercast backtest --series kv` on Azure code, Azure conv, Mooncake and the flash-sale
   scenario): every model's scores, then the goal ratios: LSTM peak_mae / predict_linear's and / the best classical
   baseline's, band coverage - nominal, breach recall / precision / median lead at 0.75 beside predict_linear's.
2. Prophet on ServeGen traffic (`language/m-large`, days 0-8, 600 s windows): origins every 6 h from day 1, Prophet
   fitted on everything before the origin and forecasting the next 6 h; for each day its peak hour (highest actual
   mean rate) is forecast from the last origin at or before the hour starts.  Error = |forecast - actual| / actual
   of the hour's mean rate; compared with seasonal naive (same hour yesterday; same hour last week where a week
   of history exists).
3. Traffic 300 s ahead on the request traces (`--series rps`): Prophet beside the baselines.
4. Cost: Prophet refits for 50 series on this machine, against the 180 s predictive loop, with the Kalman
   baseline's forecast cost for the same 50 series measured in the same run.
Nothing is asserted; figures and ratios are printed (and written as JSON with --json).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from predictors.backtest_cli import backtest, load_series
from predictors.base import History

CLASSICAL = ("last_value", "predict_linear", "holt_winters", "kalman")
KV_TRACES = {
    "azure-code": "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "azure-conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "mooncake": "mooncake_fast25/conversation_trace.jsonl",
    "flash-sale": "scenario:flash-sale",
}
BURSTY = ("azure-code", "mooncake", "flash-sale")


def _args(trace: str, series: str, **kw) -> argparse.Namespace:
    base = dict(
        trace=trace,
        series=series,
        horizon=300.0,
        step=15.0,
        threshold=None,
        warmup=300.0,
        refit=1800.0,
        config=None,
        start=None,
        end=None,
        models=None,
        lstm=None,
        no_lstm=False,
        no_prophet=False,
        json=True,
        plot=None,
    )
    base.update(kw)
    return argparse.Namespace(**base)


def _ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def kv_section(root: Path, names: list[str], plot_dir: Path | None) -> dict:
    out = {}
    for name in names:
        spec = KV_TRACES[name]
        trace = spec if spec.startswith("scenario:") else str(root / spec)
        t0 = time.perf_counter()
        plot = str(plot_dir / f"kv-{name}.png") if plot_dir else None
        try:
            res = backtest(load_series(_args(trace, "kv")), _args(trace, "kv", plot=plot))
        except Exception as e:  # one broken input must not lose the other traces' figures
            print(f"# {name}: FAILED: {e}\n", flush=True)
            continue
        res["wall_seconds"] = round(time.perf_counter() - t0, 1)
        m = res["models"]
        classical = {k: m[k]["peak_mae"] for k in CLASSICAL if k in m and m[k].get("peak_mae") is not None}
        best = min(classical, key=classical.get) if classical else None
        goal = {"best_classical": best}
        if "lstm" in m:
            lp = m["lstm"].get("peak_mae")
            goal["lstm_vs_predict_linear"] = _ratio(lp, m["predict_linear"].get("peak_mae"))
            goal["lstm_vs_best_classical"] = _ratio(lp, classical.get(best))
            cov = m["lstm"].get("coverage")
            goal["lstm_coverage_minus_nominal"] = None if cov is None else cov - m["lstm"]["coverage_nominal"]
            goal["lstm_breach"] = m["lstm"].get("breach")
        goal["predict_linear_breach"] = m["predict_linear"].get("breach")
        res["goal"] = goal
        out[name] = res
        print(_kv_table(name, res), flush=True)
    return out


def rps_section(root: Path, names: list[str]) -> dict:
    """Traffic 300 s ahead: Prophet beside the baselines (the event calendar only exists for the scenario)."""
    from predictors.backtest_cli import table

    out = {}
    for name in names:
        spec = KV_TRACES[name]
        trace = spec if spec.startswith("scenario:") else str(root / spec)
        try:
            res = backtest(load_series(_args(trace, "rps")), _args(trace, "rps"))
        except Exception as e:
            print(f"# {name} rps: FAILED: {e}\n", flush=True)
            continue
        out[name] = res
        print(table(res) + "\n", flush=True)
    return out


def _f(v, nd=3):
    if v is None:
        return "-"
    return f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def _kv_table(name: str, res: dict) -> str:
    from predictors.backtest_cli import table

    g = res["goal"]
    lines = [table(res), f"# sizing: {res['meta'].get('sizing', res['meta'].get('fleet'))}"]
    if "lstm_vs_predict_linear" in g:
        lines.append(
            f"# goal {name}: lstm peak_mae / predict_linear = {_f(g['lstm_vs_predict_linear'])} (<= 0.70), "
            f"/ best classical ({g['best_classical']}) = {_f(g['lstm_vs_best_classical'])} "
            f"({'<= 0.85' if name in BURSTY else '<= 1.00'}), coverage - nominal = "
            f"{_f(g['lstm_coverage_minus_nominal'])} (|x| <= 0.05)"
        )
    lines.append(f"# wall {res['wall_seconds']} s\n")
    return "\n".join(lines)


def servegen_section(root: Path) -> dict:
    from infercast.traces import servegen_rates
    from predictors.prophet_model import ProphetForecaster

    day = 86400.0
    t, r = servegen_rates(root / "servegen" / "data" / "language" / "m-large", 0.0, 9 * day)
    ok = np.isfinite(r)
    step = 600.0
    hist = History(t, r)

    def value_at(times: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(t, times)
        out = np.full(len(times), np.nan)
        good = (idx < len(t)) & (np.abs(t[np.minimum(idx, len(t) - 1)] - times) < 1)
        out[good] = r[idx[good]]
        return out

    origins = np.arange(day, 9 * day, 6 * 3600.0)
    forecasts = {}
    fit_s = []
    for o in origins:
        past = hist.upto(o - step)  # windows that started before the origin (their 600 s are complete)
        past = History(past.t[np.isfinite(past.y)], past.y[np.isfinite(past.y)])
        m = ProphetForecaster(daily=True, uncertainty_samples=0)
        t0 = time.perf_counter()
        m.fit([past])
        fit_s.append(time.perf_counter() - t0)
        grid = o + step * np.arange(0, 36)  # the next 6 h of windows, starting at the origin
        pred = m.predict_at(grid).yhat
        forecasts[o] = dict(zip(grid.tolist(), pred.tolist(), strict=True))
    rows = []
    for d in range(1, 9):
        hours = d * day + 3600.0 * np.arange(24)
        means = []
        for h0 in hours:
            v = value_at(h0 + step * np.arange(6))
            means.append(np.nanmean(v) if np.isfinite(v).sum() >= 4 else np.nan)
        if not np.isfinite(means).any():
            continue
        h0 = hours[int(np.nanargmax(means))]
        actual = float(np.nanmax(means))
        wins = h0 + step * np.arange(6)
        o = max(x for x in origins if x <= h0)
        prophet = float(np.mean([forecasts[o][w] for w in wins]))
        sn_day = float(np.nanmean(value_at(wins - day)))
        sn_week = float(np.nanmean(value_at(wins - 7 * day))) if h0 - 7 * day >= 0 else None
        rows.append(
            {
                "day": d,
                "peak_hour": int((h0 % day) // 3600),
                "actual": actual,
                "prophet": prophet,
                "hours_ahead": (h0 - o) / 3600,
                "seasonal_naive_day": sn_day,
                "seasonal_naive_week": sn_week,
            }
        )

    def ape(key):
        e = [abs(x[key] - x["actual"]) / x["actual"] for x in rows if x[key] is not None and math.isfinite(x[key])]
        return float(np.mean(e)) if e else None

    week_days = [x for x in rows if x["seasonal_naive_week"] is not None]
    res = {
        "days": rows,
        "mape_prophet": ape("prophet"),
        "mape_seasonal_naive_day": ape("seasonal_naive_day"),
        "mape_seasonal_naive_week": ape("seasonal_naive_week"),
        "mape_prophet_on_week_days": float(np.mean([abs(x["prophet"] - x["actual"]) / x["actual"] for x in week_days]))
        if week_days
        else None,
        "prophet_fit_seconds_mean": float(np.mean(fit_s)),
        "missing_windows": int((~ok).sum()),
    }
    res["ratio_vs_day"] = _ratio(res["mape_prophet"], res["mape_seasonal_naive_day"])
    res["ratio_vs_week"] = _ratio(res["mape_prophet_on_week_days"], res["mape_seasonal_naive_week"])
    print("# Prophet on ServeGen language/m-large, days 1-8, peak hour of each day (mean rate over the hour)")
    print("day  hour  ahead_h    actual   prophet  naive_day  naive_week")
    for x in rows:
        print(
            f"{x['day']:>3}  {x['peak_hour']:>4}  {x['hours_ahead']:>7.1f}  {x['actual']:>8.1f}  {x['prophet']:>8.1f}  "
            f"{x['seasonal_naive_day']:>9.1f}  {_f(x['seasonal_naive_week'], 1):>10}"
        )
    print(
        f"# peak-hour MAPE: prophet {_f(res['mape_prophet'])}, naive day {_f(res['mape_seasonal_naive_day'])} "
        f"(ratio {_f(res['ratio_vs_day'])}, goal <= 0.85); on days with a week of history: prophet "
        f"{_f(res['mape_prophet_on_week_days'])}, naive week {_f(res['mape_seasonal_naive_week'])} "
        f"(ratio {_f(res['ratio_vs_week'])})\n",
        flush=True,
    )
    return res


def cost_section(n_series: int = 50) -> dict:
    from predictors.kalman import Kalman
    from predictors.prophet_model import ProphetForecaster

    rng = np.random.default_rng(0)
    out = {}
    # Two shapes the service meets: 6 h of 15 s samples (its default history) and 8 days of 600 s windows.
    for label, step, n in (("6h@15s", 15.0, 1440), ("8d@600s", 600.0, 1152)):
        t = np.arange(n) * step
        hs = [
            History(t, 100 * (1 + 0.5 * np.sin(2 * np.pi * t / 86400 + i)) + rng.normal(0, 5, n))
            for i in range(n_series)
        ]
        t0 = time.perf_counter()
        for h in hs:
            Kalman(clip=(0, math.inf)).forecast(h, 300)
        kalman_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for h in hs:
            m = ProphetForecaster()
            m.fit([h])
            m.forecast(h, 300)
        prophet_s = time.perf_counter() - t0
        out[label] = {
            "series": n_series,
            "prophet_refit_and_forecast_seconds": round(prophet_s, 2),
            "kalman_forecast_seconds": round(kalman_s, 3),
            "prophet_share_of_180s_loop": round(prophet_s / 180.0, 3),
            "prophet_vs_kalman": round(prophet_s / kalman_s, 1),
        }
        print(
            f"# cost {label}: {n_series} Prophet refits+forecasts {prophet_s:.1f} s = {prophet_s / 180:.2f} of the "
            f"180 s loop (goal < 1); Kalman forecasts of the same series {kalman_s:.2f} s (Prophet/Kalman "
            f"{prophet_s / kalman_s:.0f}x)",
            flush=True,
        )
    return out


def _m(v, nd=3) -> str:
    if v is None:
        return "-"
    return str(v) if isinstance(v, int) else f"{v:.{nd}f}"


def markdown(result: dict) -> str:
    """The figures as the Markdown tables of docs/predictors.md."""
    out = []
    if "kv" in result:
        out.append("### KV usage 300 s ahead (`--series kv`, threshold 0.75, P10-P90 band)\n")
        for name, res in result["kv"].items():
            first = next(iter(res["models"].values()))
            sizing = res["meta"].get("sizing") or {"nodes": res["meta"].get("fleet")}
            out.append(
                f"**{name}**: {res['samples']} samples at 15 s, {first['breach']['breaches']} breach(es) scored; "
                f"fleet {sizing}\n"
            )
            out.append(
                "| model | mae | peak_mae | coverage | pinball | recall | precision | median lead s | false alarms/h "
                "| ms/forecast |"
            )
            out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for m, s in res["models"].items():
                b = s.get("breach") or {}
                ms = s.get("predict_seconds_per_series")
                out.append(
                    f"| {m} | {_m(s.get('mae'))} | {_m(s.get('peak_mae'))} | {_m(s.get('coverage'), 2)} | "
                    f"{_m(s.get('pinball'), 4)} | {_m(b.get('recall'), 2)} | {_m(b.get('precision'), 2)} | "
                    f"{_m(b.get('median_lead_seconds'), 0)} | {_m(b.get('false_alarms_per_hour'), 1)} | "
                    f"{_m(ms * 1000 if ms is not None else None, 1)} |"
                )
            g = res["goal"]
            if "lstm_vs_predict_linear" in g:
                out.append(
                    f"\nLSTM peak_mae / predict_linear's = **{_m(g['lstm_vs_predict_linear'])}**; / best classical "
                    f"({g['best_classical']}) = **{_m(g['lstm_vs_best_classical'])}**; coverage - nominal = "
                    f"**{_m(g['lstm_coverage_minus_nominal'])}**.\n"
                )
            else:
                out.append("\n(no LSTM in this run)\n")
    if "rps" in result:
        out.append("### Traffic 300 s ahead (`--series rps`, requests/s)\n")
        out.append("| trace | model | mae | peak_mae | coverage | pinball | ms/forecast |")
        out.append("|---|---|---:|---:|---:|---:|---:|")
        for name, res in result["rps"].items():
            for m, s in res["models"].items():
                ms = s.get("predict_seconds_per_series")
                out.append(
                    f"| {name} | {m} | {_m(s.get('mae'), 2)} | {_m(s.get('peak_mae'), 2)} | "
                    f"{_m(s.get('coverage'), 2)} | {_m(s.get('pinball'), 3)} | {_m(ms * 1000 if ms else None, 1)} |"
                )
        out.append("")
    if "servegen_prophet" in result:
        sg = result["servegen_prophet"]
        out.append("### Prophet on ServeGen language/m-large (days 1-8, peak hour of each day)\n")
        out.append(
            "| day | peak hour | hours ahead | actual req/s | Prophet | same hour yesterday | same hour last week |"
        )
        out.append("|---:|---:|---:|---:|---:|---:|---:|")
        for x in sg["days"]:
            out.append(
                f"| {x['day']} | {x['peak_hour']} | {x['hours_ahead']:.0f} | {x['actual']:.1f} | {x['prophet']:.1f} | "
                f"{x['seasonal_naive_day']:.1f} | {_m(x['seasonal_naive_week'], 1)} |"
            )
        out.append(
            f"\nPeak-hour MAPE: Prophet **{_m(sg['mape_prophet'])}**, seasonal naive (yesterday) "
            f"**{_m(sg['mape_seasonal_naive_day'])}**: ratio **{_m(sg['ratio_vs_day'])}**.  On the days with a week "
            f"of history: Prophet {_m(sg['mape_prophet_on_week_days'])}, last week "
            f"{_m(sg['mape_seasonal_naive_week'])}: ratio {_m(sg['ratio_vs_week'])}.\n"
        )
    if "cost" in result:
        out.append("### Prophet cost (50 series, this machine)\n")
        out.append(
            "| history | Prophet refit + forecast, 50 series | share of the 180 s loop | Kalman forecasts, same |"
        )
        out.append("|---|---:|---:|---:|")
        for label, c in result["cost"].items():
            out.append(
                f"| {label} | {c['prophet_refit_and_forecast_seconds']} s | {c['prophet_share_of_180s_loop']} | "
                f"{c['kalman_forecast_seconds']} s |"
            )
        out.append("")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", default="/work/shared/traces", help="folder holding the traces (as in README)")
    p.add_argument("--kv", default=",".join(KV_TRACES), help="comma-separated KV traces to run")
    p.add_argument("--skip-kv", action="store_true")
    p.add_argument("--skip-rps", action="store_true")
    p.add_argument("--skip-servegen", action="store_true")
    p.add_argument("--skip-cost", action="store_true")
    p.add_argument("--plots", default=None, help="folder for the backtest PNGs")
    p.add_argument("--json", default=None, help="write all figures to this JSON file")
    p.add_argument("--markdown", default=None, help="write the tables as Markdown (for docs/predictors.md)")
    a = p.parse_args()
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    root = Path(a.traces)
    plots = Path(a.plots) if a.plots else None
    if plots:
        plots.mkdir(parents=True, exist_ok=True)
    result = {}
    if not a.skip_kv:
        result["kv"] = kv_section(root, [n for n in a.kv.split(",") if n], plots)
    if not a.skip_rps:
        result["rps"] = rps_section(root, [n for n in a.kv.split(",") if n])
    if not a.skip_servegen:
        result["servegen_prophet"] = servegen_section(root)
    if not a.skip_cost:
        result["cost"] = cost_section()
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2, default=float))
    if a.markdown:
        Path(a.markdown).write_text(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
