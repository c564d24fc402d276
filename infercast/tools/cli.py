"""The `infercast` command line: one subcommand per component, parsed and run by the module that owns it.

Each subcommand lives in the module that owns it; that module provides `add_arguments(parser)` and
`run(args) -> int`.  Modules are imported only when their command runs, so `infercast twin run` never imports
torch and `infercast --help` is instant.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import infercast

if TYPE_CHECKING:
    from infercast.config import FleetConfig
    from infercast.exporters.sources import Source

#: the first thing `infercast --help` says: what infercast does
DESCRIPTION = (
    "infercast watches an LLM inference fleet: it exports the engines', GPUs' and router's metrics, forecasts KV-cache "
    "use and traffic, alerts before the fleet saturates, and can scale it ahead of demand (advisory by default). "
    "A fleet twin simulates the fleet to try it all without GPUs."
)


class Command(Protocol):
    """What a subcommand provides: a module with these two functions, or an object wiring them."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


@dataclass(frozen=True)
class Wired:
    """A command whose `run` is given what its module must not import itself (the exporter: the twin's source)."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# Each loader imports its command's module when that command runs (a real import, inside the function: start-up
# stays instant and `infercast twin run` never imports torch), so the layer check (bench/structure.py) sees it.
def _demo() -> Command:
    from infercast.simulator.demo import cli

    return cli


def _twin() -> Command:
    from infercast.simulator import twin_cli

    return twin_cli


def _twin_source(config: FleetConfig, name: str) -> Source:
    """The source of a `kind: twin` target: the simulator's, handed to the exporter (which never imports it)."""
    from infercast.simulator.twin.source import TwinSource

    return TwinSource(config, name=name)


def _exporter() -> Command:
    from infercast.exporters import cli

    return Wired(cli.add_arguments, functools.partial(cli.run, make_twin=_twin_source))


def _predictor() -> Command:
    from infercast.predictors import cli

    return cli


def _actuator() -> Command:
    from infercast.actuators import cli

    return cli


def _backtest() -> Command:
    from infercast.simulator.replay import backtest_cli

    return backtest_cli


def _train() -> Command:
    from infercast.simulator.replay import train_cli

    return train_cli


def _dashboards() -> Command:
    from infercast.dashboards import cli

    return cli


def _check() -> Command:
    from infercast.tools import check

    return check


def _k8s() -> Command:
    from infercast.tools.k8s import cli

    return cli


def _lab() -> Command:
    from infercast.simulator.lab import cli

    return cli


# command -> (its loader, one-line help)
COMMANDS: dict[str, tuple[Callable[[], Command], str]] = {
    "demo": (_demo, "replay the flash sale under every control (none to perfect-forecast) and write a report"),
    "twin": (_twin, "run the fleet twin on a scenario or a real trace"),
    "exporter": (_exporter, "serve the catalog metrics scraped from engines, GPUs and the router"),
    "predictor": (_predictor, "forecast KV usage and traffic; serve the forecasts as metrics"),
    "actuator": (_actuator, "act on forecasts and alerts, advisory by default; `actuator log`: its audit"),
    "backtest": (_backtest, "score every forecaster on a trace with a rolling origin"),
    "train": (_train, "train the LSTM forecaster and save its model file"),
    "dashboards": (_dashboards, "build the Grafana dashboards or push them to a Grafana"),
    "check": (_check, "validate a fleet file, the alert rules and the dashboards"),
    "k8s": (_k8s, "generate and validate the Kubernetes manifests (deploy/kubernetes/)"),
    "lab": (_lab, "run real vLLM engines behind HAProxy with the whole stack (needs install.sh --engines)"),
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


def _load(loader: Callable[[], Command]) -> Command:
    try:
        return loader()
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
    for name, (loader, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            mod = _load(loader)
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
