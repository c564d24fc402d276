"""`infercast k8s build|fleet|validate`: generate deploy/kubernetes/, adapt a fleet file, check the rendered tree.

- `build`: writes the Kustomize base (deploy/kubernetes/base/) and the production overlay's fleet file from
  examples/kubernetes.yaml; `--check` exits 1 when a committed file differs; `--out DIR` with other settings
  (`--namespace`, `--release`, `--fleet`, ...) writes a custom base there instead.
- `fleet FILE`: prints FILE adapted for the cluster (the ConfigMap's content) for an overlay of your own.
- `prometheus --fleet FILE --out DIR`: for a Prometheus without the Operator (Debian, docker-compose):
  DIR/prometheus.yml scraping the fleet file's engine and dcgm targets with `pool` and `version` target labels,
  and DIR/engines.yml, the recording rules on the engines' own metrics (docs/quickstart-prometheus.md); with the
  fleet file's `metrics.source: engines`, also DIR/recording.yml and DIR/alerts.yml, the alerts reading them.
- `validate [OVERLAY ...]`: renders each overlay (default: all of deploy/kubernetes/overlays/) with `kubectl
  kustomize` and checks every object (infercast/tools/k8s/validate.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infercast.config import ConfigError
from infercast.resources import example_fleet, require_checkout

from .settings import REPO, K8sSettings

PRODUCTION_FLEET_SOURCE = example_fleet("kubernetes")
PRODUCTION_FLEET = REPO / "deploy" / "kubernetes" / "overlays" / "production" / "fleet.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    d = K8sSettings()
    b = sub.add_parser("build", help="write deploy/kubernetes/base (and the production overlay's fleet file)")
    b.add_argument("--check", action="store_true", help="exit 1 if a committed file differs from a fresh build")
    b.add_argument("--out", type=Path, help="write a custom base into this directory instead")
    b.add_argument(
        "--fleet",
        type=Path,
        default=d.fleet,
        help="fleet file: its pools, engines, thresholds and actuator go into the ConfigMap, PodMonitors, rules, "
        f"dashboards and the actuator's RBAC (default: the shipped {d.fleet.name})",
    )
    b.add_argument("--namespace", default=d.namespace, help=f"where infercast runs (default {d.namespace})")
    b.add_argument("--engine-namespace", default=d.engine_namespace, help="where the engines' Deployments are")
    b.add_argument("--release", default=d.release, help="the kube-prometheus-stack release (its `release` label)")
    b.add_argument(
        "--image",
        default=d.image,
        help="NAME:TAG the per-component images are named from: NAME-exporter:TAG (the exporters, the NVML "
        f"DaemonSet included), NAME-predictor:TAG, NAME-actuator:TAG (the actuator and alert log) (default {d.image})",
    )
    b.add_argument("--prometheus-url", default=d.prometheus_url, help="Prometheus, Thanos Query or Mimir (in-cluster)")
    b.add_argument(
        "--predictor-shards",
        type=int,
        default=d.predictor_shards,
        help=f"predictor replicas, each forecasting its share of the pools (default {d.predictor_shards})",
    )
    b.add_argument(
        "--actuator-replicas",
        type=int,
        default=d.actuator_replicas,
        help=f"actuator replicas; one leads through a Lease, the others stay advisory (default {d.actuator_replicas})",
    )
    b.add_argument(
        "--audit-storage",
        default=d.audit_storage,
        help=f"size of each actuator replica's audit volume, a PersistentVolumeClaim (default {d.audit_storage})",
    )
    b.add_argument("--audit-storage-class", default=None, help="its StorageClass (default: the cluster's default)")
    f = sub.add_parser("fleet", help="print a fleet file adapted for the cluster (the ConfigMap's fleet.yaml)")
    f.add_argument("file", type=Path, help="the fleet file to adapt")
    f.add_argument("--namespace", default=d.namespace, help=f"where infercast runs (default {d.namespace})")
    f.add_argument(
        "--engine-namespace",
        default=d.engine_namespace,
        help=f"where the engines' Deployments are (default {d.engine_namespace})",
    )
    f.add_argument("--prometheus-url", default=d.prometheus_url, help="Prometheus, Thanos Query or Mimir (in-cluster)")
    pr = sub.add_parser(
        "prometheus", help="write a plain Prometheus config scraping the fleet's engines, and the engine rules"
    )
    pr.add_argument("--fleet", type=Path, required=True, help="the fleet file (its targets, pools and versions)")
    pr.add_argument("--out", type=Path, required=True, help="directory for prometheus.yml and engines.yml")
    pr.add_argument("--interval", default="15s", help="scrape and rule evaluation interval (default 15s)")
    pr.add_argument(
        "--rate-window",
        default=None,
        help="the rules' rate() window (default the fleet file's metrics.rate_window, 5m: the names say rate5m)",
    )
    v = sub.add_parser("validate", help="render overlays with kubectl kustomize and check every object")
    v.add_argument("overlays", nargs="*", type=Path, help="overlay directories (default: every one)")


def _settings(args: argparse.Namespace, **over: object) -> K8sSettings:
    keys = ("namespace", "engine_namespace", "release", "image", "prometheus_url", "predictor_shards")
    keys += ("actuator_replicas", "audit_storage", "audit_storage_class")
    kw = {k: getattr(args, k) for k in keys if hasattr(args, k)}
    kw.update(over)
    try:
        return K8sSettings(**kw)  # type: ignore[arg-type]
    except ValueError as e:
        raise ConfigError(str(e)) from None


def run(args: argparse.Namespace) -> int:
    if args.action == "build":
        return _build(args)
    if args.action == "fleet":
        return _fleet(args)
    if args.action == "prometheus":
        return _prometheus(args)
    return _validate(args.overlays)


def _read_fleet(path: Path) -> None:
    if not path.is_file():
        raise ConfigError(f"{path}: no such fleet file")


def _build(args: argparse.Namespace) -> int:
    from .build import BASE, base_files, stale, write
    from .fleet import load_cluster_fleet

    _read_fleet(args.fleet)
    s = _settings(args, fleet=args.fleet)
    files = base_files(s)
    if args.out is not None:
        for p in write(args.out, files):
            print(p)
        return 0
    if s != K8sSettings():
        raise ConfigError("custom settings need --out DIR (the committed tree keeps the defaults)")
    require_checkout("infercast k8s build")
    _, production = load_cluster_fleet(K8sSettings(fleet=PRODUCTION_FLEET_SOURCE))
    if args.check:
        bad = [BASE / n for n in stale(BASE, files)]
        if not PRODUCTION_FLEET.exists() or PRODUCTION_FLEET.read_text() != production:
            bad.append(PRODUCTION_FLEET)
        for p in bad:
            print(f"out of date: {p.relative_to(REPO)} (run infercast k8s build)", file=sys.stderr)
        return 1 if bad else 0
    for p in write(BASE, files):
        print(p.relative_to(REPO))
    PRODUCTION_FLEET.write_text(production)
    print(PRODUCTION_FLEET.relative_to(REPO))
    return 0


def _fleet(args: argparse.Namespace) -> int:
    from .fleet import load_cluster_fleet

    _read_fleet(args.file)
    _, text = load_cluster_fleet(_settings(args, fleet=args.file))
    sys.stdout.write(text)
    return 0


def _prometheus(args: argparse.Namespace) -> int:
    import yaml

    from infercast.alertrules.engines import engine_rule_file
    from infercast.config import load_config

    from .scrape import prometheus_config

    cfg = load_config(args.fleet)
    if args.rate_window:
        cfg = cfg.model_copy(update={"metrics": cfg.metrics.model_copy(update={"rate_window": args.rate_window})})
    try:
        rules = engine_rule_file(cfg)
    except ValueError as e:
        raise ConfigError(f"--rate-window: {e}") from None
    header = f"# Generated by `infercast k8s prometheus` from {args.fleet.name}; regenerate instead of editing.\n"
    args.out.mkdir(parents=True, exist_ok=True)
    docs = {"engines.yml": rules}
    if cfg.metrics.source == "engines":
        # the alerts and their recording rules read the engine rules: they go with them (the exporter's job, for
        # what the engines do not give, is yours to add: docs/exporters.md)
        from infercast.alertrules.rules import rule_files
        from infercast.alertrules.settings import AlertSettings

        docs |= rule_files(AlertSettings.from_fleet(cfg))
    docs = {"prometheus.yml": prometheus_config(cfg, interval=args.interval, rule_files=tuple(docs)), **docs}
    for name, doc in docs.items():
        (args.out / name).write_text(header + yaml.safe_dump(doc, sort_keys=False, width=1000))
        print(args.out / name)
    return 0


def _validate(paths: list[Path]) -> int:
    from .validate import ValidationError, overlays, render, validate_objects

    require_checkout(
        "infercast k8s validate",
        "it checks against the CRD schemas and validators vendored in an infercast checkout (deploy/kubernetes/crds)",
        "run it from a clone of the repository",
    )
    failed = 0
    for overlay in paths or overlays():
        try:
            objs = render(overlay)
        except ValidationError as e:
            print(f"{overlay}: {e}", file=sys.stderr)
            failed += 1
            continue
        report = validate_objects(objs, str(overlay))
        for line in report.unchecked:
            print(f"{overlay}: NOT CHECKED {line}", file=sys.stderr)
        for line in report.errors:
            print(f"{overlay}: {line}", file=sys.stderr)
        print(f"{overlay}: {len(objs)} objects, {len(report.checked)} checked, {len(report.unchecked)} without a "
              f"schema, {len(report.errors)} errors")  # fmt: skip
        failed += bool(report.errors)
    return 1 if failed else 0
