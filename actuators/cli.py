"""`infercast actuator --config FILE [--mode advisory|active]` and `infercast actuator log ...`.

The first runs the daemon (actuators/daemon.py, docs/actuator.md); the second prints the audit trail
(actuators/log_cli.py).
"""

from __future__ import annotations

import argparse

from infercast.actuators import log_cli


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="fleet file (its `actuator:` section configures the daemon)")
    p.add_argument("--mode", choices=["advisory", "active"], help="override actuator.mode")
    p.add_argument(
        "--tick",
        default=None,
        metavar="MODULE:FACTORY",
        help="the control loop: FACTORY(parts) -> tick "
        "(default: infercast's own, infercast.actuators.controller:build_tick)",
    )
    p.add_argument("--once", action="store_true", help="run the control loop once, print its report as JSON, exit")
    sub = p.add_subparsers(dest="actuator_command", metavar="{log}")
    log_cli.add_arguments(sub.add_parser("log", help="print the audit trail as a table", description=log_cli.__doc__))


def run(args: argparse.Namespace) -> int:
    if args.actuator_command == "log":
        return log_cli.run(args)
    from infercast.actuators import daemon_cli

    return daemon_cli.run(args)
