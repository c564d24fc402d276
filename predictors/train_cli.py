"""`infercast train --out predictors/models/lstm_kv [--from-twin] [--servegen DIR ...] [--traces PATH ...]
[--seed 0] [--max-epochs N]`: (re)build the LSTM's model file reproducibly.

Training data (see `predictors.pretrain_data`): KV series from the fluid pool model driven by ServeGen rates
(`--servegen`, a ServeGen model directory or a folder above several) and synthetic surges; with `--from-twin`,
also the fleet twin's runs of the flash-sale scenario.  The development traces given with `--traces` (Azure CSV,
Mooncake JSONL, or folders holding them) are *held out*: they only choose the epoch to stop at and are scored in
the metadata; they are never trained on.  Same arguments and seed -> the same model file.

`infercast train --out STEM --calibrate-only [--servegen DIR ...]` refits only the band calibration of the
existing model STEM (per-step P10/P90 widening factors, split conformal, see `LSTMForecaster.calibrate`) and
rewrites only STEM.json; the weights are not touched.  The calibration data are twin runs that neither training
nor scoring uses: `--calib-variants` surge-scenario variants and `--calib-servegen-hours` one-hour ServeGen
slices, drawn with seeds offset from training's (`--seed` + 500 and + 600).  Never the development traces.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_FLEET = Path(__file__).resolve().parent.parent / "examples" / "flash-sale.yaml"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="model path stem: writes OUT.safetensors and OUT.json")
    p.add_argument("--servegen", nargs="*", default=[], help="ServeGen model dirs (or a folder above them)")
    p.add_argument("--traces", nargs="*", default=[], help="held-out validation traces (files or folders)")
    p.add_argument("--from-twin", action="store_true", help="add the fleet twin's runs to the training data")
    p.add_argument("--twin-variants", type=int, default=6, help="with --from-twin: surge-scenario variants to run")
    p.add_argument("--twin-weight", type=float, default=1.0, help="with --from-twin: sampling weight of twin runs")
    p.add_argument("--twin-servegen-hours", type=int, default=4, help="with --from-twin: ServeGen hours to replay")
    p.add_argument("--config", default=str(DEFAULT_FLEET), help="fleet file for the twin (default flash-sale)")
    p.add_argument("--series", type=int, default=96, help="generated series (pools) (default 96)")
    p.add_argument("--hours", type=float, default=6.0, help="hours per generated series (default 6)")
    p.add_argument("--surges-per-hour", type=float, default=0.25, help="synthetic surges per series-hour")
    p.add_argument("--step", type=float, default=15.0, help="model step, seconds (default 15, the scrape step)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-epochs", type=int, default=30)
    p.add_argument("--windows-per-epoch", type=int, default=20_000)
    p.add_argument("--hidden", type=int, default=48)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: shared machines)")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    p.add_argument(
        "--calibrate-only",
        action="store_true",
        help="refit only the band calibration of the existing model OUT (weights unchanged; rewrites OUT.json)",
    )
    p.add_argument("--calib-variants", type=int, default=12, help="calibration: twin surge variants (default 12)")
    p.add_argument(
        "--calib-servegen-hours", type=int, default=2, help="calibration: one-hour ServeGen twin replays (default 2)"
    )
    p.add_argument("--calib-coverage", type=float, default=0.8, help="calibration: P10-P90 coverage to reach")


def _servegen_dirs(roots: list[str]) -> list[Path]:
    """Directories that hold ServeGen chunk files, under each root (the root itself when it holds them)."""
    out: list[Path] = []
    for r in roots:
        root = Path(r)
        if not root.is_dir():
            raise SystemExit(f"infercast train: --servegen {r}: not a directory")
        found = sorted({f.parent for f in root.rglob("chunk-*-trace.csv*")})
        if not found:
            raise SystemExit(f"infercast train: --servegen {r}: no chunk-N-trace.csv(.gz) files under it")
        out += found
    return out


def _trace_files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for s in paths:
        p = Path(s)
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in (".csv", ".jsonl", ".gz"))
        else:
            raise SystemExit(f"infercast train: --traces {s}: no such file or directory")
    return [f for f in out if "servegen" not in f.parts and "LICENSE" not in f.name]


def run(args: argparse.Namespace) -> int:
    import torch

    from infercast.config import load_config
    from predictors import pretrain_data as D
    from predictors.lstm import LSTMForecaster, LSTMParams

    torch.set_num_threads(max(1, args.threads))
    if args.calibrate_only:
        return calibrate_only(args)
    t0 = time.perf_counter()
    sg = _servegen_dirs(args.servegen)
    rates = D.servegen_rate_series(sg)
    train = D.generated_histories(
        rates, args.series, args.hours, seed=args.seed, out_step_s=args.step, surges_per_hour=args.surges_per_hour
    )
    sources = [name for name, _, _ in rates] or ["synthetic-diurnal"]
    cfg = None
    if args.from_twin:
        try:
            import infercast.twin.run  # noqa: F401
        except ImportError as e:
            raise SystemExit(f"infercast train: --from-twin needs the fleet twin (infercast.twin.run): {e}") from e
        cfg = load_config(args.config)
        n_generated = len(train)
        variants = D.scenario_variants(cfg, args.twin_variants, seed=args.seed + 100)
        train += D.twin_scenario_histories(variants, step_s=args.step)
        sources.append(f"twin: {args.twin_variants} variants of the {cfg.name} scenario")
        if args.twin_servegen_hours and sg:
            slices = D.servegen_slices(sg, args.twin_servegen_hours, seed=args.seed + 200)
            train += D.twin_trace_histories(slices, cfg, seed=args.seed, step_s=args.step)
            sources.append(f"twin: {args.twin_servegen_hours} one-hour ServeGen slices")
        log.info("twin data generated (%.0f s so far)", time.perf_counter() - t0)
    log.info(
        "training data: %d series, %.0f h (%.1f s to generate)", len(train), _hours(train), time.perf_counter() - t0
    )

    val = []
    files = _trace_files(args.traces)
    if files:
        from infercast.traces import load_trace

        traces = [load_trace(f) for f in files]
        if cfg is not None:
            val = D.twin_trace_histories(traces, cfg, seed=args.seed, step_s=args.step)
        else:
            for i, tr in enumerate(traces):
                val += D.trace_histories(tr, n_pools=4, seed=args.seed + 1000 + i, out_step_s=args.step)
    params = LSTMParams(
        step_s=args.step,
        seed=args.seed,
        max_epochs=args.max_epochs,
        windows_per_epoch=args.windows_per_epoch,
        hidden=args.hidden,
    )
    model = LSTMForecaster(params, progress=not args.no_progress)
    t1 = time.perf_counter()
    weights = None
    if cfg is not None and args.twin_weight != 1.0:
        weights = [1.0] * n_generated + [args.twin_weight] * (len(train) - n_generated)
    model.fit(train, validation=val, weights=weights)
    train_s = time.perf_counter() - t1
    extra = {
        "data": {
            "sources": sources,
            "generated_series": args.series,
            "hours_per_series": args.hours,
            "surges_per_hour": args.surges_per_hour,
            "twin_weight": args.twin_weight if cfg is not None else None,
            "validation_held_out": [f.name for f in files],
            "validation_kind": "twin" if cfg is not None and files else ("fluid pool model" if files else "none"),
        },
        "command": "infercast train " + " ".join(shlex.quote(a) for a in sys.argv[2:])
        if len(sys.argv) > 1 and sys.argv[1] == "train"
        else None,
        "train_seconds": round(train_s, 1),
    }
    model.save(args.out, extra=extra)
    s = model.meta_["scores"]
    print(
        f"wrote {args.out}.safetensors/.json: {len(train)} series, {_hours(train):.0f} h; "
        f"{s.get('epochs_run')} epochs in {train_s:.0f} s; val peak_mae {s.get('val_peak_mae')}, "
        f"band coverage {s.get('val_band_coverage')}"
    )
    return 0


def calibration_histories(args: argparse.Namespace, cfg) -> tuple[list, list[str]]:
    """Twin runs for the band calibration, with seeds training doesn't use; (histories, description)."""
    from predictors import pretrain_data as D

    hs: list = []
    sources: list[str] = []
    if args.calib_variants:
        variants = D.scenario_variants(cfg, args.calib_variants, seed=args.seed + 500)
        hs += D.twin_scenario_histories(variants, step_s=args.step)
        sources.append(f"twin: {args.calib_variants} variants of the {cfg.name} scenario (seeds {args.seed + 500}+)")
    sg = _servegen_dirs(args.servegen)
    if args.calib_servegen_hours and sg:
        slices = D.servegen_slices(sg, args.calib_servegen_hours, seed=args.seed + 600)
        hs += D.twin_trace_histories(slices, cfg, seed=args.seed + 600, step_s=args.step)
        sources.append(f"twin: {args.calib_servegen_hours} one-hour ServeGen slices (seed {args.seed + 600})")
    return hs, sources


def calibrate_only(args: argparse.Namespace) -> int:
    """Refit the band calibration of the model at --out and rewrite only its JSON metadata."""
    from infercast.config import load_config
    from predictors import modelfile
    from predictors.lstm import CALIBRATION_KEY, LSTMForecaster

    try:
        import infercast.twin.run  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"infercast train --calibrate-only: needs the fleet twin (infercast.twin.run): {e}") from e
    try:
        model = LSTMForecaster.load(args.out)
    except modelfile.ModelFileError as e:
        raise SystemExit(f"infercast train --calibrate-only: {e}") from e
    if model.params.step_s != args.step:
        raise SystemExit(
            f"infercast train --calibrate-only: --step {args.step:g} but the model's is {model.params.step_s:g}"
        )
    t0 = time.perf_counter()
    cfg = load_config(args.config)
    hs, sources = calibration_histories(args, cfg)
    if not hs:
        raise SystemExit("infercast train --calibrate-only: no calibration data (--calib-variants 0 and no ServeGen)")
    log.info("calibration data: %d series, %.1f h (%.0f s)", len(hs), _hours(hs), time.perf_counter() - t0)
    command = (
        "infercast train " + " ".join(shlex.quote(a) for a in sys.argv[2:])
        if len(sys.argv) > 1 and sys.argv[1] == "train"
        else None
    )
    rec = model.calibrate(hs, coverage=args.calib_coverage, source={"data": sources, "command": command})
    modelfile.update_metadata(args.out, {CALIBRATION_KEY: rec})
    before, after = rec["coverage_before"], rec["coverage_after"]
    print(
        f"calibrated {args.out}.json on {rec['series']} series, {rec['origins']} origins: coverage at the horizon "
        f"{before[-1]:.3f} -> {after[-1]:.3f} (mean over steps {sum(before) / len(before):.3f} -> "
        f"{sum(after) / len(after):.3f}); factors at the horizon lower x{rec['lower'][-1]:.2f}, "
        f"upper x{rec['upper'][-1]:.2f}"
    )
    return 0


def _hours(hs) -> float:
    return float(sum(len(h.t) * h.step for h in hs) / 3600) if hs else 0.0
