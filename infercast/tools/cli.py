"""The `infercast` command line: one subcommand per component, parsed and run by the module that owns it.

Each subcommand lives in the module that owns it; that module provides `add_arguments(parser)` and
`run(args) -> int`.  Modules are imported only when their command runs, so `infercast twin run` never imports
torch and `infercast --help` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

import infercast

#: the first thing `infercast --help` says: what infercast does
DESCRIPTION = (
    "infercast watches an LLM inference fleet: it exports the engines', GPUs' and router's metrics, forecasts KV-cache "
    "use and traffic, alerts before the fleet saturates, and can scale it ahead of demand (advisory by default). "
    "A fleet twin simulates the fleet to try it all without GPUs."
)

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "infercast.simulator.demo",
        "replay the flash sale under every control (none to perfect-forecast) and write a report",
    ),
    "twin": ("infercast.simulator.twin.cli", "run the fleet twin on a scenario or a real trace"),
    "exporter": ("infercast.exporters.cli", "serve the catalog metrics scraped from engines, GPUs and the router"),
    "predictor": ("infercast.predictors.cli", "forecast KV usage and traffic; serve the forecasts as metrics"),
    "actuator": (
        "infercast.actuators.cli",
        "act on forecasts and alerts, advisory by default; `actuator log`: its audit",
    ),
    "backtest": ("infercast.simulator.replay.backtest_cli", "score every forecaster on a trace with a rolling origin"),
    "train": ("infercast.simulator.replay.train_cli", "train the LSTM forecaster and save its model file"),
    "dashboards": ("infercast.dashboards.cli", "build the Grafana dashboards or push them to a Grafana"),
    "check": ("infercast.tools.check", "validate a fleet file, the alert rules and the dashboards"),
    "k8s": ("infercast.tools.k8s.cli", "generate and validate the Kubernetes manifests (deploy/kubernetes/)"),
    "lab": (
        "infercast.simulator.lab.cli",
        "run real vLLM engines behind HAProxy with the whole stack (needs install.sh --engines)",
    ),
}


#: commands that always simulate the fleet: a fleet file given with --config must carry every version's model
#: shape.  Checked here, before `--size-fleet` sizes a fleet from it (the twin's own sources are pinned by the
#: published results, so the refusal lives outside them; the engines refuse an unsized model when built too).
TWIN_COMMANDS = ("twin", "demo")


#: optional dependency (top-level module) -> the extra that installs it (pyproject.toml)
OPTIONAL_MODULES = {
    **dict.fromkeys(("torch", "prophet", "statsmodels", "safetensors"), "predictor"),
    "grafana_foundation_sdk": "grafana",
    "redis": "redis",
    "kubernetes": "kubernetes",
}


def _require_twin_shapes(path: str) -> None:
    from infercast.config import load_config

    load_config(path).require_twin_shapes()


def _load(module: str):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        # Only a missing optional dependency is worth a friendly message; a missing infercast module is a bug.
        extra = OPTIONAL_MODULES.get((e.name or "").split(".")[0])
        if extra:
            raise SystemExit(
                f"infercast: this command needs {e.name}: pip install 'infercast[{extra}]' "
                "(in a checkout: bash scripts/install.sh)"
            ) from e
        raise


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="infercast", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"infercast {infercast.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help="each has its own --help")
    # Only the chosen command's module is imported (to add its arguments).
    chosen = next((a for a in argv if a in COMMANDS), None)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            mod = _load(module)
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    from infercast.config import ConfigError

    try:
        if args.command in TWIN_COMMANDS and getattr(args, "config", None):
            _require_twin_shapes(args.config)
        return int(args._run(args) or 0)
    except ConfigError as e:
        print(f"infercast: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
