"""`infercast train --out predictors/models/lstm_kv [--from-twin] [--servegen DIR ...] [--twin-weight W ...]
[--seed 0] [--max-epochs N]`: (re)build the LSTM's model file reproducibly.

Training data (see `infercast.simulator.replay.pretrain_data`): KV series from the fluid pool model driven by ServeGen
rates (`--servegen`, a ServeGen model directory or a folder above several) and synthetic surges; with `--from-twin`,
also the fleet twin's runs: `--twin-variants` variants of the fleet file's surge scenario (seeds `--seed` + 100...)
and `--twin-servegen-hours` one-hour ServeGen slices (arrival seeds `--seed` + 200...).

Validation, i.e. the choice of the stopping epoch and of the model that ships, uses only data the backtest
(`infercast backtest`, `bench/forecast.py`) never scores: the last `val_fraction` of every training series
(time-ordered split) and, with `--from-twin`, twin runs of their own: `--val-variants` surge-scenario variants
(seeds `--seed` + 300...) and `--val-servegen-hours` one-hour ServeGen slices (seed `--seed` + 400, drawn apart from
the training slices).  The development traces (Azure code and conv, Mooncake) and the flash-sale scenario itself
(seed 0) are what the backtest scores, so they are used nowhere here.  Given several `--twin-weight` values, one
model is trained per value and the one with the lowest loss on the validation twin runs ships (the fit's own
validation loss when there are none); every candidate's scores are kept in the metadata (`selection`).  The
metadata also records the exact data (seeds, slices) and the twin's provenance (`twin`: the repository commit,
whether the twin's sources differed from it, and a hash of them).  Same arguments and seed -> the same weights.

`infercast train --out STEM --calibrate-only [--servegen DIR ...]` refits only the band calibration of the
existing model STEM (per-step P10/P90 widening factors, split conformal, see `LSTMForecaster.calibrate`) and
rewrites only STEM.json; the weights are not touched.  The calibration data are twin runs that neither training,
validation nor scoring uses: `--calib-variants` surge-scenario variants (seeds `--seed` + 500...) and
`--calib-servegen-hours` one-hour ServeGen slices (seed `--seed` + 600, drawn apart from the slices the model's
metadata lists for training and validation).  Never the development traces.

`infercast train --from-prometheus URL [--since 7d | --start T --end T] [--matchers L=V ...] [--out STEM]` learns
the LSTM from the fleet's own history instead, scores it on a held-out tail against predict_linear and refuses
(rc 2, with the reason) a history too short, an unreachable Prometheus or missing series:
`infercast.predictors.train_prometheus`.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from infercast.resources import example_fleet, package_dir

if TYPE_CHECKING:
    from infercast.predictors.lstm import LSTMForecaster

log = logging.getLogger(__name__)

DEFAULT_FLEET = example_fleet()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        default=None,
        help="model path stem: writes OUT.safetensors and OUT.json (required, except with --from-prometheus: "
        "default ./lstm_kv_local)",
    )
    p.add_argument("--servegen", nargs="*", default=[], help="ServeGen model dirs (or a folder above them)")
    p.add_argument("--from-twin", action="store_true", help="add the fleet twin's runs to the training data")
    p.add_argument("--twin-variants", type=int, default=6, help="with --from-twin: surge-scenario variants to run")
    p.add_argument(
        "--twin-weight",
        type=float,
        nargs="+",
        default=[1.0],
        help="with --from-twin: sampling weight of twin runs; several values train one candidate each and keep "
        "the one with the lowest loss on the validation twin runs",
    )
    p.add_argument("--twin-servegen-hours", type=int, default=4, help="with --from-twin: ServeGen hours to replay")
    p.add_argument(
        "--val-variants", type=int, default=4, help="with --from-twin: validation surge variants (default 4)"
    )
    p.add_argument(
        "--val-servegen-hours", type=int, default=2, help="with --from-twin: validation ServeGen hours (default 2)"
    )
    p.add_argument(
        "--config",
        default=str(DEFAULT_FLEET),
        help="fleet file: the twin's; with --from-prometheus, its metrics.source says which series are read "
        "(default flash-sale)",
    )
    p.add_argument("--series", type=int, default=96, help="generated series (pools) (default 96)")
    p.add_argument("--hours", type=float, default=6.0, help="hours per generated series (default 6)")
    p.add_argument("--surges-per-hour", type=float, default=0.25, help="synthetic surges per series-hour")
    p.add_argument("--step", type=float, default=15.0, help="model step, seconds (default 15, the scrape step)")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the generated series, twin runs and training (default 0)"
    )
    p.add_argument(
        "--max-epochs",
        type=int,
        default=30,
        help="most training epochs; training stops sooner after 4 epochs without a better validation loss (default 30)",
    )
    p.add_argument(
        "--windows-per-epoch", type=int, default=20_000, help="training windows drawn per epoch (default 20000)"
    )
    p.add_argument("--hidden", type=int, default=48, help="LSTM hidden units (default 48)")
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
    from infercast.predictors import train_prometheus

    train_prometheus.add_arguments(p)


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


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(max(1, args.threads))
    if args.from_prometheus:
        from infercast.predictors import train_prometheus

        if args.calibrate_only or args.from_twin or args.servegen:
            print("infercast train: --from-prometheus trains on that history alone", file=sys.stderr)
            return 2
        return train_prometheus.run(args)
    if not args.out:
        print("infercast train: --out is required (the model path stem)", file=sys.stderr)
        return 2
    if args.calibrate_only:
        return calibrate_only(args)
    if len(args.twin_weight) > 1 and not args.from_twin:
        raise SystemExit("infercast train: several --twin-weight values need --from-twin")
    return _pretrain(args)


def _pretrain(args: argparse.Namespace) -> int:
    """Train on generated series (and twin runs, with --from-twin), one candidate per twin weight, and write the one
    the validation chooses, with what it was trained, validated and chosen on."""
    from infercast.config import load_config
    from infercast.predictors.lstm import LSTMParams
    from infercast.simulator.replay import pretrain_data as D

    t0 = time.perf_counter()
    sg = _servegen_dirs(args.servegen)
    rates = D.servegen_rate_series(sg)
    train = D.generated_histories(
        rates, args.series, args.hours, seed=args.seed, out_step_s=args.step, surges_per_hour=args.surges_per_hour
    )
    n_generated = len(train)
    sources = [name for name, _, _ in rates] or ["synthetic-diurnal"]
    data: dict = {
        "generated_series": args.series,
        "hours_per_series": args.hours,
        "surges_per_hour": args.surges_per_hour,
    }
    val: list = []
    validation: dict = {
        "early_stopping": f"the last {LSTMParams().val_fraction:.0%} of each training series (time-ordered split)"
        + (" and the validation twin runs" if args.from_twin else ""),
        "not_used": "the development traces (Azure code and conv, Mooncake) and the flash-sale scenario's own run "
        "(seed 0): the backtest scores them",
    }
    twin = None
    if args.from_twin:
        try:
            import infercast.simulator.twin.run  # noqa: F401
        except ImportError as e:
            raise SystemExit(
                f"infercast train: --from-twin needs the fleet twin (infercast.simulator.twin.run): {e}"
            ) from e
        cfg = load_config(args.config)
        twin = twin_provenance(Path(args.config))
        train_runs, hs, val_runs, val = _training_and_validation_runs(cfg, sg, args)
        train += hs
        sources += train_runs.pop("sources")
        data["twin_runs"] = train_runs
        validation["sources"] = val_runs.pop("sources")
        validation["twin_runs"] = val_runs
        log.info("twin data generated (%.0f s so far)", time.perf_counter() - t0)
    data["sources"] = sources
    data["validation"] = validation
    log.info(
        "training data: %d series, %.0f h; validation twin runs: %d series (%.1f s to generate)",
        len(train),
        _hours(train),
        len(val),
        time.perf_counter() - t0,
    )
    weights_tried = args.twin_weight if args.from_twin else [1.0]
    candidates = [_candidate(args, train, val, n_generated, w) for w in weights_tried]
    criterion = "loss on the validation twin runs" if val else "validation loss of the fit (time-ordered split)"
    model, chosen = min(candidates, key=lambda c: c[1]["validation_twin"]["loss"] if val else c[1]["val_loss"])
    data["twin_weight"] = chosen["twin_weight"] if args.from_twin else None
    validation["model_choice"] = (
        f"{criterion}, among twin weights {weights_tried}" if len(weights_tried) > 1 else "one candidate"
    )
    extra = {
        "data": data,
        "selection": {"criterion": criterion, "candidates": [r for _, r in candidates], "chosen": chosen},
        "twin": twin,
        "command": _command(),
        "train_seconds": chosen["train_seconds"],
    }
    model.save(args.out, extra=extra)
    s = model.meta_["scores"]
    print(
        f"wrote {args.out}.safetensors/.json: {len(train)} series, {_hours(train):.0f} h; "
        f"{s.get('epochs_run')} epochs in {chosen['train_seconds']:.0f} s (twin weight {data['twin_weight']}); "
        f"val peak_mae {s.get('val_peak_mae')}, band coverage {s.get('val_band_coverage')}"
        + (f"; validation twin runs loss {chosen['validation_twin']['loss']}" if val else "")
    )
    return 0


def _training_and_validation_runs(cfg, sg: list[Path], args: argparse.Namespace) -> tuple[dict, list, dict, list]:
    """The twin runs to train on and those to choose the model on, apart: (what the training runs are, their
    histories, what the validation runs are, theirs).  Training's ServeGen replays keep the twin seed they always had
    (--seed); validation's get their own, and their slices avoid the training ones."""
    train_runs, train = _twin_runs(
        cfg,
        sg,
        args,
        variants=args.twin_variants,
        hours=args.twin_servegen_hours,
        seed=args.seed + 100,
        twin_seed=args.seed,
    )
    val_runs, val = _twin_runs(
        cfg,
        sg,
        args,
        variants=args.val_variants,
        hours=args.val_servegen_hours,
        seed=args.seed + 300,
        twin_seed=args.seed + 400,
        avoid=_slices(train_runs),
    )
    return train_runs, train, val_runs, val


def _candidate(
    args: argparse.Namespace, train: list, val: list, n_generated: int, twin_weight: float
) -> tuple[LSTMForecaster, dict]:
    """A model fitted with the twin runs weighted `twin_weight`, and its record: the fit's scores and seconds, and
    its scores on the validation twin runs when there are any."""
    t1 = time.perf_counter()
    model = _fit(args, train, val, n_generated, twin_weight)
    rec = {"twin_weight": twin_weight, "train_seconds": round(time.perf_counter() - t1, 1), **model.meta_["scores"]}
    if val:
        rec["validation_twin"] = model.evaluate(val)
    log.info("candidate twin_weight %g: %s", twin_weight, rec)
    return model, rec


def _twin_runs(
    cfg, sg: list[Path], args: argparse.Namespace, *, variants: int, hours: int, seed: int, twin_seed: int, avoid=()
) -> tuple[dict, list]:
    """Twin runs: `variants` variants of the scenario (seeds `seed`...) and `hours` ServeGen slices (seed
    `seed` + 100, none overlapping a slice in `avoid`) replayed with twin seed `twin_seed`.
    Returns (what they are, for the metadata; their histories)."""
    from infercast.simulator.replay import pretrain_data as D

    hs: list = []
    what: dict = {"sources": [], "scenario_variants": None, "servegen_slices": []}
    if variants:
        hs += D.twin_scenario_histories(D.scenario_variants(cfg, variants, seed=seed), step_s=args.step)
        what["scenario_variants"] = {"scenario": cfg.name, "seeds": list(range(seed, seed + variants))}
        what["sources"].append(f"twin: {variants} variants of the {cfg.name} scenario (seeds {seed}+)")
    if hours and sg:
        specs = D.plan_servegen_slices(sg, hours, seed=seed + 100, avoid=avoid)
        hs += D.twin_trace_histories(D.load_servegen_slices(sg, specs), cfg, seed=twin_seed, step_s=args.step)
        what["servegen_slices"] = [{**x.as_dict(), "twin_seed": twin_seed} for x in specs]
        what["sources"].append(f"twin: {hours} one-hour ServeGen slices (seed {seed + 100})")
    return what, hs


def _fit(args: argparse.Namespace, train: list, val: list, n_generated: int, twin_weight: float):
    from infercast.predictors.lstm import LSTMForecaster
    from infercast.predictors.train_prometheus import lstm_params

    model = LSTMForecaster(lstm_params(args), progress=not args.no_progress)
    weights = None
    if twin_weight != 1.0:
        weights = [1.0] * n_generated + [twin_weight] * (len(train) - n_generated)
    return model.fit(train, validation=val, weights=weights)


def _command() -> str | None:
    if len(sys.argv) > 1 and sys.argv[1] == "train":
        return "infercast train " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    return None


def twin_provenance(config: Path) -> dict:
    """Which twin made the twin runs: the repository commit, whether the twin's sources or the fleet file differ
    from it, and sha256 hashes of both (which identify them even without git)."""
    import infercast

    twin = package_dir("infercast.simulator.twin")
    root = twin.parents[2]  # names hashed as infercast/simulator/twin/..., in a checkout and installed alike
    h = hashlib.sha256()
    for f in sorted(twin.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    out: dict = {
        "infercast_version": infercast.__version__,
        "twin_sources_sha256": h.hexdigest(),
        "config": config.name,
        "config_sha256": hashlib.sha256(config.read_bytes()).hexdigest(),
        "commit": None,
        "dirty": None,
    }
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "infercast/simulator/twin", str(config.resolve())],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return out
    if head.returncode == 0:
        out["commit"] = head.stdout.strip()
        out["dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    return out


def _slices(runs: dict | None) -> list:
    """The ServeGen slice specs a `_twin_runs` record lists."""
    from infercast.simulator.replay.pretrain_data import SliceSpec

    return [
        SliceSpec(x["source"], x["start_s"], x["end_s"], x["seed"]) for x in (runs or {}).get("servegen_slices", [])
    ]


def calibration_histories(args: argparse.Namespace, cfg, meta: dict | None = None) -> tuple[list, dict]:
    """Twin runs for the band calibration, with seeds neither training nor validation uses, and ServeGen slices
    apart from those the model's metadata `meta` lists; (histories, what they are)."""
    data = (meta or {}).get("data", {})
    avoid = _slices(data.get("twin_runs")) + _slices(data.get("validation", {}).get("twin_runs"))
    what, hs = _twin_runs(
        cfg,
        _servegen_dirs(args.servegen),
        args,
        variants=args.calib_variants,
        hours=args.calib_servegen_hours,
        seed=args.seed + 500,
        twin_seed=args.seed + 600,
        avoid=avoid,
    )
    return hs, what


def calibrate_only(args: argparse.Namespace) -> int:
    """Refit the band calibration of the model at --out and rewrite only its JSON metadata."""
    from infercast.config import load_config
    from infercast.predictors import modelfile
    from infercast.predictors.lstm import CALIBRATION_KEY, LSTMForecaster

    try:
        import infercast.simulator.twin.run  # noqa: F401
    except ImportError as e:
        raise SystemExit(
            f"infercast train --calibrate-only: needs the fleet twin (infercast.simulator.twin.run): {e}"
        ) from e
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
    hs, what = calibration_histories(args, cfg, model.meta_)
    if not hs:
        raise SystemExit("infercast train --calibrate-only: no calibration data (--calib-variants 0 and no ServeGen)")
    log.info("calibration data: %d series, %.1f h (%.0f s)", len(hs), _hours(hs), time.perf_counter() - t0)
    source = {
        "data": what["sources"],
        "scenario_variants": what["scenario_variants"],
        "servegen_slices": what["servegen_slices"],
        "twin": twin_provenance(Path(args.config)),
        "command": _command(),
    }
    rec = model.calibrate(hs, coverage=args.calib_coverage, source=source)
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
