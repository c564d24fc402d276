"""`infercast dashboards build|push`: write the dashboards' JSON, or provision them into a Grafana."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .build import DASHBOARDS, DEFAULT_FLEET, GENERATED, DashboardSettings, build_all, render


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="write dashboards/generated/*.json from dashboards/build.py")
    b.add_argument("--out", type=Path, default=GENERATED, help=f"output directory (default {GENERATED})")
    b.add_argument("--check", action="store_true", help="exit 1 if the files in --out differ from a fresh build")
    b.add_argument(
        "--fleet",
        type=Path,
        default=None,
        help="fleet file whose thresholds and version model names the dashboards use "
        f"(default: the shipped {DEFAULT_FLEET.name})",
    )
    p = sub.add_parser(
        "push", help="upload the dashboards to Grafana (GRAFANA_URL and GRAFANA_TOKEN from the environment)"
    )
    p.add_argument(
        "--dir", type=Path, default=GENERATED, help=f"directory of dashboard JSON files (default {GENERATED})"
    )
    p.add_argument("--folder", default="infercast", help="folder uid to put them in (created if missing)")


def run(args: argparse.Namespace) -> int:
    if args.action == "build":
        return _build(args.out, args.check, _settings(args.fleet))
    return _push(args.dir, args.folder)


def _settings(fleet: Path | None) -> DashboardSettings:
    """The fleet file's settings (ConfigError, exit 2, when it is not valid), or the default ones."""
    from infercast.config import load_config

    return DashboardSettings.from_fleet(load_config(fleet)) if fleet else DashboardSettings.default()


def _build(out: Path, check: bool, settings: DashboardSettings) -> int:
    if check:
        stale = [
            n
            for n in DASHBOARDS
            if not (out / f"{n}.json").exists() or (out / f"{n}.json").read_text() != render(n, settings)
        ]
        for n in stale:
            print(f"out of date: {out / f'{n}.json'} (run infercast dashboards build)", file=sys.stderr)
        return 1 if stale else 0
    for path in build_all(out, settings):
        print(path)
    return 0


def _push(directory: Path, folder: str) -> int:
    from infercast.redact import redact_url

    from .push import PushError, load_dashboards, push

    url = os.environ.get("GRAFANA_URL", "").strip()
    token = os.environ.get("GRAFANA_TOKEN", "").strip() or None
    if not url:
        print("infercast: set GRAFANA_URL (and GRAFANA_TOKEN, a service-account token) to push", file=sys.stderr)
        return 2
    files = sorted(directory.glob("*.json"))
    if not files:
        print(f"infercast: no dashboards in {directory}; run infercast dashboards build first", file=sys.stderr)
        return 2
    try:
        done = push(url, token, load_dashboards(files), folder)
    except PushError as e:
        print(f"infercast: {e}", file=sys.stderr)
        return 1
    for d in done:
        print(f"pushed {d.uid} ({d.title}) version {d.version} {d.url}")
    print(f"{len(done)} dashboards pushed to {redact_url(url)} folder {folder}", file=sys.stderr)
    return 0
