"""`infercast check`: validate a fleet file, the alert rules (and that they were built from that fleet file's
thresholds), the Alertmanager configuration and the dashboards.

With `--config FILE`, everything is checked against that fleet: the rules, Alertmanager configuration and dashboards
it builds, unless `--rules` / `--alertmanager` / `--dashboards` name the files to check instead (named rules must
then also be the ones FILE builds).  Without `--config`: the shipped example fleet and the files built from it.

Each check prints one line (`ok`, `FAILED` with the reason, or `skipped` with why) and the command exits non-zero
when any check failed.  A file or directory it was asked to check (or its default: the shipped example fleet, rules
and dashboards) that is missing or empty is a failure, never a silent pass.  Rules and the Alertmanager file are
checked by the real `promtool` and `amtool` (Debian packages `prometheus` and `prometheus-alertmanager`); when a
binary is missing its checks are skipped, not passed, unless `--strict` makes that a failure.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

from infercast.config import ConfigError, load_config
from infercast.resources import dashboards_dir, example_fleet, package_dir, rules_dir

Status = Literal["ok", "FAILED", "skipped"]
TOOL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class CheckResult:
    what: str  # e.g. "config", "rules", "alertmanager", "dashboard"
    target: str  # the file or directory checked
    status: Status
    detail: str = ""

    def line(self) -> str:
        text = f"{self.status:<8}{self.what} {self.target}"
        return f"{text}: {self.detail}" if self.detail else text


# A runner takes argv and returns (exit code, combined output); tests and callers may pass their own.
Runner = Callable[[list[str]], tuple[int, str]]


def run_tool(argv: list[str]) -> tuple[int, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} did not finish within {TOOL_TIMEOUT_S:.0f} s"
    except OSError as e:
        return 127, f"cannot run {argv[0]}: {e.strerror or e}"
    return proc.returncode, (proc.stdout or "") + (proc.stderr or "")


def _reason(output: str, path: Path | None = None, limit: int = 400) -> str:
    """The informative part of a tool's output, on one line (headers and generic summaries dropped)."""
    lines = []
    for ln in output.splitlines():
        ln = re.sub(r"^Checking \S+\s*", "", ln.strip()).strip()
        if not ln or ln in ("FAILED:", "SUCCESS") or re.search(r"error: failed to validate \d+ file", ln):
            continue
        ln = ln.removeprefix("FAILED: ")
        lines.append(ln.removeprefix(f"{path}: ") if path is not None else ln)  # our line names the file already
    text = "; ".join(lines) or " ".join(output.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def check_config(path: Path) -> CheckResult:
    try:
        cfg = load_config(path)
    except ConfigError as e:
        message = " ".join(str(e).split()).removeprefix(f"{path}: ")  # the line names the file already
        return CheckResult("config", _rel(path), "FAILED", message)
    counts = ", ".join(
        _count(n, noun)
        for n, noun in ((len(cfg.pools), "pool"), (len(cfg.versions), "version"), (len(cfg.targets), "target"))
    )
    return CheckResult("config", _rel(path), "ok", counts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


AM_FILE = "alertmanager.yml"


def rule_files(rules_dir: Path) -> list[Path]:
    """The rule files under `rules_dir`: every *.yml / *.yaml but an Alertmanager config (`infercast.alertrules.generate
    --out DIR` writes alertmanager.yml beside the rules)."""
    return sorted(
        p for p in rules_dir.rglob("*") if p.is_file() and p.suffix in (".yml", ".yaml") and p.name != AM_FILE
    )


def check_rules(rules_dir: Path, promtool: str | None, runner: Runner = run_tool) -> list[CheckResult]:
    if not rules_dir.is_dir():
        return [CheckResult("rules", _rel(rules_dir), "FAILED", "no such directory")]
    files = rule_files(rules_dir)
    if not files:
        return [CheckResult("rules", _rel(rules_dir), "FAILED", "no *.yml or *.yaml files")]
    if promtool is None:
        return [CheckResult("rules", _rel(rules_dir), "skipped", "promtool is not installed (Debian: prometheus)")]
    results = []
    for f in files:
        code, out = runner([promtool, "check", "rules", str(f)])
        if code == 0:
            found = [ln.strip() for ln in out.splitlines() if "rules found" in ln]
            results.append(CheckResult("rules", _rel(f), "ok", found[0].removeprefix("SUCCESS: ") if found else ""))
        else:
            results.append(CheckResult("rules", _rel(f), "FAILED", _reason(out, f)))
    return results


def _rule_index(docs: Iterable[object]) -> dict[tuple, dict]:
    """(alert or record name, its labels) -> the rule, over rule-file documents (a name can repeat with other
    labels: a warning and a critical variant)."""
    out: dict[tuple, dict] = {}
    for doc in docs:
        groups = doc.get("groups") if isinstance(doc, dict) else None
        for g in groups if isinstance(groups, list) else ():
            for r in (g.get("rules") or []) if isinstance(g, dict) else ():
                if isinstance(r, dict) and (r.get("alert") or r.get("record")):
                    labels = r.get("labels") if isinstance(r.get("labels"), dict) else {}
                    out[(r.get("alert") or r.get("record"), tuple(sorted(labels.items())))] = r
    return out


def check_rules_built_from(config: Path, rules_dir: Path) -> CheckResult | None:
    """Do the infercast rules in `rules_dir` compare with the thresholds of the fleet file `config`?  The rules
    are generated from a fleet file (`python -m infercast.alertrules.generate --fleet`); edit a threshold in the fleet
    file and forget to regenerate, and Prometheus keeps paging at the old one.  Every rule infercast would build from
    `config` that `rules_dir` holds (same name and labels) must have the same `expr` and `for:`; rules of the
    user's own are not looked at.  None (no line) where there is nothing to compare: the fleet file does not load
    (its own line says why), no such directory (the rules line says so), none of infercast's rules in it."""
    what = "rules-vs-fleet"
    try:
        cfg = load_config(config)
    except ConfigError:
        return None
    if not rules_dir.is_dir():
        return None
    from infercast.alertrules.engines import engine_rule_file
    from infercast.alertrules.rules import rule_files as build_rule_files
    from infercast.alertrules.settings import AlertSettings

    built = _rule_index([*build_rule_files(AlertSettings.from_fleet(cfg)).values(), engine_rule_file(cfg)])
    found: list[object] = []
    for f in rule_files(rules_dir):
        try:
            found.append(yaml.safe_load(f.read_text()))
        except (OSError, yaml.YAMLError):
            continue  # the rules check says what is wrong with it
    held = _rule_index(found)
    common = [k for k in built if k in held]
    if not common:
        return None
    differ = [
        k
        for k in common
        if (str(held[k].get("expr", "")).strip(), held[k].get("for"))
        != (str(built[k]["expr"]).strip(), built[k].get("for"))
    ]
    if not differ:
        return CheckResult(what, _rel(rules_dir), "ok", f"{_count(len(common), 'rule')} as {_rel(config)} builds them")
    name, _ = differ[0]
    first, want = held[differ[0]], built[differ[0]]
    field = "for" if first.get("for") != want.get("for") else "expr"
    return CheckResult(
        what,
        _rel(rules_dir),
        "FAILED",
        f"{len(differ)} of {len(common)} rules differ from what {_rel(config)} builds (first: {name} {field} "
        f"{' '.join(str(first.get(field)).split())!r}, the fleet gives {' '.join(str(want.get(field)).split())!r}); "
        f"rebuild them: python -m infercast.alertrules.generate --fleet {config} --out <dir>",
    )


def check_runbooks(rules_dir: Path, configs: Iterable[Path] = ()) -> CheckResult | None:
    """Can the person paged open each alert's runbook?  Every infercast alert in `rules_dir` needs a `runbook_url`; an
    http(s) link is what a pager opens (`ok`); a path (the default: the runbooks' place in the package, no published
    base URL) is `skipped`, a failure with --strict; a path to a page that does not exist, or links that are not
    under the `alerting.runbook_base_url` a fleet file in `configs` sets, fail.  None (no line) where the directory
    holds none of infercast's alerts."""
    what = "runbooks"
    if not rules_dir.is_dir():
        return None
    from infercast.alertrules.rules import alert_names

    ours = set(alert_names())  # your own alerts are not looked at, as by rules-vs-fleet
    urls: dict[str, str | None] = {}
    for f in rule_files(rules_dir):
        try:
            doc = yaml.safe_load(f.read_text())
        except (OSError, yaml.YAMLError):
            continue  # the rules check says what is wrong with it
        for (name, _), rule in _rule_index([doc]).items():
            if "alert" in rule and name in ours:
                ann = rule.get("annotations") if isinstance(rule.get("annotations"), dict) else {}
                urls[name] = ann.get("runbook_url")
    if not urls:
        return None
    missing = sorted(n for n, u in urls.items() if not u)
    if missing:
        return CheckResult(what, _rel(rules_dir), "FAILED", f"no runbook_url on {', '.join(missing[:5])}")
    for config in configs:
        try:
            base = load_config(config).alerting.runbook_base_url
        except ConfigError:
            continue  # its own line says why
        wrong = sorted(n for n, u in urls.items() if base and not str(u).startswith(base + "/"))
        if wrong:
            return CheckResult(
                what,
                _rel(rules_dir),
                "FAILED",
                f"{len(wrong)} of {len(urls)} alerts do not link under {_rel(config)}'s alerting.runbook_base_url "
                f"{base} (first: {wrong[0]} -> {urls[wrong[0]]}); rebuild them: python -m "
                f"infercast.alertrules.generate --fleet {config} --out <dir>",
            )
    links = {n: str(u) for n, u in urls.items() if re.match(r"https?://", str(u))}
    paths = {n: str(u) for n, u in urls.items() if n not in links}
    # the default path is the runbooks' place inside the package (alertrules/runbooks/<alert>.md)
    roots = (Path.cwd(), package_dir("infercast.alertrules").parent, rules_dir)
    absent = sorted(n for n, u in paths.items() if not any((root / u).is_file() for root in roots))
    if absent:
        return CheckResult(
            what, _rel(rules_dir), "FAILED", f"runbook pages not found: {', '.join(paths[n] for n in absent[:3])}"
        )
    if paths:
        return CheckResult(
            what,
            _rel(rules_dir),
            "skipped",
            f"{_count(len(paths), 'alert')} link to a path ({next(iter(paths.values()))}), not a page a pager can "
            "open: publish alertrules/runbooks/ and set alerting.runbook_base_url in the fleet file",
        )
    return CheckResult(what, _rel(rules_dir), "ok", f"{_count(len(links), 'alert')} link to an http(s) runbook")


def check_alertmanager(path: Path, amtool: str | None, runner: Runner = run_tool) -> CheckResult:
    if not path.is_file():
        return CheckResult("alertmanager", _rel(path), "FAILED", "no such file")
    if amtool is None:
        return CheckResult(
            "alertmanager", _rel(path), "skipped", "amtool is not installed (Debian: prometheus-alertmanager)"
        )
    code, out = runner([amtool, "check-config", str(path)])
    if code == 0:
        return CheckResult("alertmanager", _rel(path), "ok")
    return CheckResult("alertmanager", _rel(path), "FAILED", _reason(out, path))


def _panels(doc: object) -> list | None:
    if isinstance(doc, dict):
        if isinstance(doc.get("panels"), list):
            return doc["panels"]
        inner = doc.get("dashboard")  # the shape Grafana's HTTP API takes
        if isinstance(inner, dict) and isinstance(inner.get("panels"), list):
            return inner["panels"]
    return None


def check_dashboards(dash_dir: Path) -> list[CheckResult]:
    if not dash_dir.is_dir():
        return [CheckResult("dashboard", _rel(dash_dir), "FAILED", "no such directory")]
    files = sorted(dash_dir.glob("*.json"))
    if not files:
        return [CheckResult("dashboard", _rel(dash_dir), "FAILED", "no *.json files")]
    results = []
    for f in files:
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            results.append(CheckResult("dashboard", _rel(f), "FAILED", f"not valid JSON: {e.msg} at line {e.lineno}"))
            continue
        except (OSError, UnicodeDecodeError) as e:
            results.append(CheckResult("dashboard", _rel(f), "FAILED", f"cannot read: {e}"))
            continue
        panels = _panels(doc)
        if panels is None:
            results.append(CheckResult("dashboard", _rel(f), "FAILED", "no 'panels' list"))
        else:
            results.append(CheckResult("dashboard", _rel(f), "ok", _count(len(panels), "panel")))
    return results


def _tool(name: str, *alternatives: str) -> str | None:
    for n in (name, *alternatives):
        found = shutil.which(n) or (f"/usr/bin/{n}" if Path(f"/usr/bin/{n}").exists() else None)
        if found:
            return found
    return None


def run_checks(
    configs: Iterable[Path],
    rules_dir: Path,
    alertmanager: Path,
    dashboards_dir: Path,
    *,
    promtool: str | None,
    amtool: str | None,
    runner: Runner = run_tool,
    rules_of: Iterable[Path] = (),
) -> list[CheckResult]:
    """Every check; `rules_of`: the fleet files whose thresholds the rules in `rules_dir` must have been built from."""
    results = [check_config(c) for c in configs]
    results += check_rules(rules_dir, promtool, runner)
    results += [r for r in (check_rules_built_from(c, rules_dir) for c in rules_of) if r is not None]
    results += [r for r in (check_runbooks(rules_dir, rules_of),) if r is not None]
    results.append(check_alertmanager(alertmanager, amtool, runner))
    results += check_dashboards(dashboards_dir)
    return results


def check_fleet_builds(
    config: Path,
    *,
    promtool: str | None,
    amtool: str | None,
    runner: Runner = run_tool,
    rules: bool = True,
    alertmanager: bool = True,
    dashboards: bool = True,
) -> list[CheckResult]:
    """The alert rules, Alertmanager configuration and dashboards that the fleet file `config` builds (what
    `python -m infercast.alertrules.generate --fleet` and `infercast dashboards build --fleet` write),
    checked as the files on disk are: promtool, amtool, the dashboards' JSON.  `infercast check --config FILE`
    runs this for each FILE unless `--rules` / `--alertmanager` / `--dashboards` name the files to check instead:
    before, it checked the shipped example's files and said "ok" for a fleet they were not built from (issue 38).
    Each line names the fleet file and the generated file (`FILE -> alerts.yml`).  Nothing when the fleet file does
    not load (its own line says why)."""
    import tempfile

    try:
        cfg = load_config(config)
    except ConfigError:
        return []
    from infercast.alertrules.generate import generated_files
    from infercast.alertrules.settings import AlertSettings
    from infercast.dashboards.build import DASHBOARDS, DashboardSettings, render

    results: list[CheckResult] = []
    with tempfile.TemporaryDirectory(prefix="infercast-check-") as tmp:
        out = Path(tmp)
        files = generated_files(AlertSettings.from_fleet(cfg), compose=False, fleet=cfg)
        for rel, text in files.items():
            dest = out / ("alertmanager" if Path(rel).name == AM_FILE else "rules") / Path(rel).name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
        if dashboards:
            settings = DashboardSettings.from_fleet(cfg)
            (out / "dashboards").mkdir()
            for name in DASHBOARDS:
                (out / "dashboards" / f"{name}.json").write_text(render(name, settings))

        def named(rs: list[CheckResult]) -> list[CheckResult]:
            """`FILE -> alerts.yml` in place of the temporary path."""
            return [
                CheckResult(r.what, f"{_rel(config)} -> {Path(r.target).name}", r.status, r.detail.replace(tmp, "."))
                for r in rs
            ]

        if rules:
            results += named(check_rules(out / "rules", promtool, runner))
            results += named([r for r in (check_runbooks(out / "rules", (config,)),) if r is not None])
        if alertmanager:
            results += named([check_alertmanager(out / "alertmanager" / AM_FILE, amtool, runner)])
        if dashboards:
            results += named(check_dashboards(out / "dashboards"))
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        action="append",
        type=Path,
        metavar="FILE",
        help=f"fleet file to validate (repeatable; default {_rel(example_fleet())})",
    )
    parser.add_argument(
        "--rules",
        type=Path,
        metavar="DIR",
        help=f"alert rules to check (default: with --config, the rules each fleet file builds; without, "
        f"{_rel(rules_dir())}, built from the example fleet); given, they must also be the rules each --config file "
        "builds",
    )
    parser.add_argument(
        "--alertmanager",
        type=Path,
        metavar="FILE",
        help="Alertmanager config (default: alertmanager.yml in the --rules DIR, else beside it; with --config and "
        "no --rules, the one each fleet file builds)",
    )
    parser.add_argument(
        "--dashboards",
        type=Path,
        metavar="DIR",
        help=f"Grafana dashboards (*.json) to check (default: with --config, the dashboards each fleet file builds; "
        f"without, {_rel(dashboards_dir())})",
    )
    parser.add_argument(
        "--strict", action="store_true", help="count skipped checks (promtool or amtool not installed) as failed"
    )


def run(args: argparse.Namespace) -> int:
    promtool, amtool = _tool("promtool"), _tool("amtool")
    if args.config:
        results = _run_for_fleets(args, promtool, amtool)
    else:  # the shipped example fleet and the files built from it
        rules = args.rules or rules_dir()
        beside = rules / AM_FILE  # the layout of `infercast.alertrules.generate --out DIR`
        results = run_checks(
            [example_fleet()],
            rules,
            args.alertmanager or (beside if beside.is_file() else rules.parent / AM_FILE),
            args.dashboards or dashboards_dir(),
            promtool=promtool,
            amtool=amtool,
            rules_of=[example_fleet()],
        )
    for r in results:
        print(r.line())
    if args.config and None in (args.rules, args.dashboards):
        print(
            "checked the rules, Alertmanager configuration and dashboards each fleet file builds; to check the "
            "files you deployed, name them: --rules DIR --dashboards DIR (written by python -m "
            "infercast.alertrules.generate --fleet FILE --out DIR and infercast dashboards build --fleet FILE "
            "--out DIR)",
            file=sys.stderr,
        )
    failed = [r for r in results if r.status == "FAILED" or (args.strict and r.status == "skipped")]
    ok = sum(r.status == "ok" for r in results)
    skipped = sum(r.status == "skipped" for r in results)
    print(f"{ok} ok, {sum(r.status == 'FAILED' for r in results)} failed, {skipped} skipped", file=sys.stderr)
    return 1 if failed else 0


def _run_for_fleets(args: argparse.Namespace, promtool: str | None, amtool: str | None) -> list[CheckResult]:
    """`--config FILE...`: everything against those fleets.  Files named with `--rules` / `--alertmanager` /
    `--dashboards` are checked as given (the rules also against each fleet file: `check_rules_built_from`); what is
    not named is built from each fleet file and checked (`check_fleet_builds`), never the shipped example's."""
    configs: list[Path] = args.config
    results = [check_config(c) for c in configs]
    if args.rules is not None:
        results += check_rules(args.rules, promtool)
        results += [r for r in (check_rules_built_from(c, args.rules) for c in configs) if r is not None]
        results += [r for r in (check_runbooks(args.rules, configs),) if r is not None]
    alertmanager = args.alertmanager
    if alertmanager is None and args.rules is not None:
        beside = args.rules / AM_FILE  # the layout of `infercast.alertrules.generate --out DIR`
        alertmanager = beside if beside.is_file() else args.rules.parent / AM_FILE
    if alertmanager is not None:
        results.append(check_alertmanager(alertmanager, amtool))
    if args.dashboards is not None:
        results += check_dashboards(args.dashboards)
    for c in configs:
        results += check_fleet_builds(
            c,
            promtool=promtool,
            amtool=amtool,
            rules=args.rules is None,
            alertmanager=alertmanager is None,
            dashboards=args.dashboards is None,
        )
    return results
