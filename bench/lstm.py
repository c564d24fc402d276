"""Quick benchmark of the LSTM forecaster against the baselines, on the same windows part A's backtest scores.

    nice -n 10 .venv/bin/python bench/lstm.py --traces PATH ... [--scenario flash-sale] [--model STEM]
        [--skip-accuracy] [--skip-inference] [--skip-training] [--train-epochs N]
    nice -n 10 .venv/bin/python bench/lstm.py --skip-accuracy --threads 1 --publish   # docs/lstm.md's cost block

Three sections, each printed as ratios against a baseline measured in the same run (absolute seconds too):

1. accuracy: per series, `peak_mae` (error of the maximum over the next 300 s) of the LSTM over
   `predict_linear(x[15m], 300)`'s and over the best classical baseline's (Holt-Winters, Kalman), band coverage
   and breach detection at 0.75.  The same network with its band calibration switched off (factors 1) is scored
   in the same run as `lstm_raw`, so the calibration's effect is read off one table.  The KV series are built
   exactly as `infercast backtest --series kv` builds them (`infercast.simulator.replay.evaluate.load_series`: the twin
   on a fleet sized per trace); when the twin is not importable, the fluid pool model of
   `infercast.simulator.replay.pretrain_data` stands in, and the table says so.
2. inference: `forecast_many` on 1,000 series, against predict_linear's `forecast` on the same series.
3. training: 50 series x 7 days of 15 s history (generated), against one epoch-equivalent of a plain numpy
   least-squares fit on the same number of windows.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from infercast.predictors.base import History

GOALS = {"vs_predict_linear": 0.7, "vs_best_classical": 0.85, "coverage": (0.75, 0.85)}
BREACH_KEYS = ("breaches", "origin_f1", "origin_precision", "origin_recall", "event_recall", "median_lead_seconds")


def _kv_series(spec: str) -> tuple[History, str]:
    """The KV series `infercast backtest --series kv --trace SPEC` scores, and how it was made."""
    try:
        import infercast.simulator.twin.run  # noqa: F401
        from infercast.simulator.replay.evaluate import BacktestOptions, load_series

        data = load_series(spec, BacktestOptions(series="kv", step=15.0))
        return data.history, "twin"
    except ImportError:
        from infercast.simulator.replay.pretrain_data import trace_histories
        from infercast.simulator.replay.traces import load_trace

        if spec.startswith("scenario:"):
            raise
        hs = trace_histories(load_trace(spec), n_pools=1, seed=0)
        return hs[0], "fluid model (twin absent)"


def accuracy(specs: list[str], model_path: str | None) -> list[dict]:
    from infercast.predictors import registry
    from infercast.predictors.backtest import run_backtest, score_runs
    from infercast.predictors.lstm import CALIBRATION_KEY

    lstm, note = registry.load_lstm(model_path)
    if lstm is None:
        raise SystemExit(note)
    raw = copy.copy(lstm)  # same network, band as trained (no calibration factors)
    raw.meta_ = {k: v for k, v in lstm.meta_.items() if k != CALIBRATION_KEY}
    raw.name = "lstm_raw"
    rows = []
    for spec in specs:
        h, how = _kv_series(spec)
        models = [registry.make(n, "kv") for n in ("predict_linear", "holt_winters", "kalman")] + [lstm, raw]
        runs = run_backtest(h, models, 300.0, warmup_s=600.0, refit_every_s=1800.0)
        sc = score_runs(h, runs, 300.0, threshold=0.75)
        pm = {k: v.get("peak_mae") for k, v in sc.items()}
        best = min(pm["holt_winters"], pm["kalman"])
        b = sc["lstm"].get("breach", {})
        braw = sc["lstm_raw"].get("breach", {})
        rows.append(
            {
                "series": Path(spec).name if not spec.startswith("scenario:") else spec,
                "made_by": how,
                "samples": len(h.t),
                "peak_mae": {k: round(v, 4) for k, v in pm.items()},
                "lstm_vs_predict_linear": round(pm["lstm"] / pm["predict_linear"], 3),
                "lstm_vs_best_classical": round(pm["lstm"] / best, 3),
                "coverage": {k: v.get("coverage") for k, v in sc.items()},
                "breach_lstm": {k: b.get(k) for k in BREACH_KEYS},
                "breach_lstm_raw": {k: braw.get(k) for k in BREACH_KEYS},
                "breach_kalman": {k: sc["kalman"].get("breach", {}).get(k) for k in BREACH_KEYS},
            }
        )
        r = rows[-1]
        print(
            f"{r['series']:<42} ({how}) peak_mae lstm {pm['lstm']:.4f}  predict_linear {pm['predict_linear']:.4f}"
            f"  hw {pm['holt_winters']:.4f}  kalman {pm['kalman']:.4f}  -> x{r['lstm_vs_predict_linear']:.2f} "
            f"(goal <= {GOALS['vs_predict_linear']}), x{r['lstm_vs_best_classical']:.2f} vs best classical "
            f"(goal <= {GOALS['vs_best_classical']}); coverage {r['coverage']['lstm']} (uncalibrated "
            f"{r['coverage']['lstm_raw']}); breach {r['breach_lstm']} (uncalibrated {r['breach_lstm_raw']})",
            flush=True,
        )
    return rows


def _series(n: int, length: int, seed: int) -> list[History]:
    rng = np.random.default_rng(seed)
    t = np.arange(length) * 15.0
    out = []
    for i in range(n):
        y = np.clip(0.4 + 0.2 * np.sin(t / 600 + i) + rng.normal(0, 0.02, length), 0, 1)
        rps = 100 * np.exp(rng.normal(0, 0.1, length))
        feats = {"rps": rps, "long_share": np.full(length, 0.2), "running": rps * 10, "waiting": np.zeros(length)}
        out.append(History(t, y, feats, f"s{i}"))
    return out


def inference(model_path: str | None, n: int = 1000) -> dict:
    from infercast.predictors import registry

    lstm, note = registry.load_lstm(model_path)
    if lstm is None:
        raise SystemExit(note)
    hs = _series(n, 80, 1)
    lstm.forecast_many(hs[:10], 300.0)  # warm up
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        lstm.forecast_many(hs, 300.0)
        times.append(time.perf_counter() - t0)
    lin = registry.make("predict_linear", "kv")
    t0 = time.perf_counter()
    for h in hs:
        lin.forecast(h, 300.0)
    base = time.perf_counter() - t0
    best = min(times)
    print(
        f"inference: lstm forecast_many on {n} series {best:.3f} s (goal <= 0.5 s); predict_linear loop "
        f"{base:.3f} s; ratio x{best / base:.2f}",
        flush=True,
    )
    return {"series": n, "lstm_s": round(best, 4), "predict_linear_s": round(base, 4), "ratio": round(best / base, 3)}


def training(epochs: int | None, seed: int = 0) -> dict:
    from infercast.predictors import features as F
    from infercast.predictors.lstm import LSTMForecaster, LSTMParams
    from infercast.simulator.replay.pretrain_data import generated_histories

    t0 = time.perf_counter()
    hs = generated_histories([], 50, 24 * 7, seed=seed)
    gen = time.perf_counter() - t0
    p = LSTMParams(seed=seed) if epochs is None else LSTMParams(seed=seed, max_epochs=epochs)
    # Baseline: one epoch-equivalent of numpy least squares on as many windows, same encoding.
    t0 = time.perf_counter()
    raw, tar = F.training_windows(hs, p.lookback, p.horizon_steps, p.windows_per_epoch, np.random.default_rng(seed))
    w = F.encode(raw)
    x = np.concatenate([w.x.reshape(len(w.x), -1), w.s, np.ones((len(w.x), 1))], axis=1)
    y = np.nan_to_num(tar - w.y_last[:, None])
    np.linalg.lstsq(x, y, rcond=None)
    base = time.perf_counter() - t0
    m = LSTMForecaster(p, progress=True)
    t0 = time.perf_counter()
    m.fit(hs)
    fit = time.perf_counter() - t0
    ep = m.meta_["scores"]["epochs_run"]
    print(
        f"training: 50 series x 7 d of 15 s ({sum(len(h.t) for h in hs):,} samples, generated in {gen:.0f} s): "
        f"lstm fit {fit:.1f} s for {ep:g} epochs (goal <= 300 s); numpy lstsq one epoch-equivalent {base:.2f} s; "
        f"ratio x{fit / base:.0f} (x{fit / ep / base:.1f} per epoch)",
        flush=True,
    )
    return {"fit_s": round(fit, 1), "epochs": ep, "lstsq_epoch_s": round(base, 3), "ratio": round(fit / base, 1)}


def table_cost(r: dict) -> str:
    """The cost block of docs/lstm.md, from docs/results/lstm-cost.json."""
    inf, tr = r["inference"], r["training"]
    per_epoch = tr["fit_s"] / max(tr["epochs"], 1) / tr["lstsq_epoch_s"]
    return "\n".join(
        [
            "| what | LSTM | baseline, same run | ratio | goal |",
            "|---|---:|---|---:|---:|",
            f"| inference: `forecast_many` on {inf['series']:,} series of 80 samples | {inf['lstm_s']:.3f} s | "
            f"`predict_linear` in a loop over them: {inf['predict_linear_s']:.2f} s | x{inf['ratio']:.2f} | <= 0.5 s |",
            f"| training: 50 series x 7 days at 15 s, {tr['epochs']:g} epochs | {tr['fit_s']:.1f} s | numpy least "
            f"squares, one epoch-equivalent: {tr['lstsq_epoch_s']:.2f} s | x{tr['ratio']:.0f} "
            f"(x{per_epoch:.1f} per epoch) | <= 300 s |",
            "",
            f"_{r['threads']} torch thread(s), load average {r['load_average'][0]} at the start and "
            f"{r['load_average'][1]} at the end ({r['machine']}, shared with other jobs); measured {r['utc']}; "
            f"`nice -n 10 .venv/bin/python {r['command']}`._",
        ]
    )


TABLES = {"cost": table_cost}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", nargs="*", default=[], help="trace files (Azure CSV, Mooncake JSONL)")
    ap.add_argument("--scenario", nargs="*", default=[], help="scenarios of examples/ (e.g. flash-sale)")
    ap.add_argument("--model", default=None, help="model stem (default: the shipped predictors/models/lstm_kv)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the goals are for 2 cores)")
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--skip-inference", action="store_true")
    ap.add_argument("--skip-training", action="store_true")
    ap.add_argument("--train-epochs", type=int, default=None, help="cap epochs for a quicker training timing")
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    ap.add_argument(
        "--publish",
        action="store_true",
        help="write docs/results/lstm-cost.json and the cost block of docs/lstm.md (needs inference and training)",
    )
    args = ap.parse_args(argv)
    if args.publish and (args.skip_inference or args.skip_training):
        ap.error("--publish needs both the inference and the training sections")
    load_before = os.getloadavg()[0]
    import torch

    torch.set_num_threads(args.threads)
    out: dict = {}
    if not args.skip_accuracy:
        specs = list(args.traces) + [f"scenario:{s}" for s in args.scenario]
        out["accuracy"] = accuracy(specs, args.model)
    if not args.skip_inference:
        out["inference"] = inference(args.model)
    if not args.skip_training:
        out["training"] = training(args.train_epochs)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    if args.publish:
        from results import publish

        cost = {
            "inference": out["inference"],
            "training": out["training"],
            "threads": args.threads,
            "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
            "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}",
            "utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": "bench/lstm.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        }
        print("published", publish("lstm-cost", cost, TABLES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
