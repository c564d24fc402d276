"""`infercast check`: validate a fleet file, the alert rules, the Alertmanager configuration and the dashboards.

Each check prints one line (`ok`, `FAILED` with the reason, or `skipped` with why) and the command exits non-zero
when any check failed.  Rules and the Alertmanager file are checked by the real `promtool` and `amtool` (Debian
packages `prometheus` and `prometheus-alertmanager`); when a binary is missing its checks are skipped, not passed,
unless `--strict` makes that a failure.
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

from infercast.config import EXAMPLES, REPO_ROOT, ConfigError, load_config

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


def rule_files(rules_dir: Path) -> list[Path]:
    return sorted(p for p in rules_dir.rglob("*") if p.is_file() and p.suffix in (".yml", ".yaml"))


def check_rules(rules_dir: Path, promtool: str | None, runner: Runner = run_tool) -> list[CheckResult]:
    if not rules_dir.is_dir():
        return [CheckResult("rules", _rel(rules_dir), "skipped", "no such directory")]
    files = rule_files(rules_dir)
    if not files:
        return [CheckResult("rules", _rel(rules_dir), "skipped", "no *.yml or *.yaml files")]
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


def check_alertmanager(path: Path, amtool: str | None, runner: Runner = run_tool) -> CheckResult:
    if not path.is_file():
        return CheckResult("alertmanager", _rel(path), "skipped", "no such file")
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
        return [CheckResult("dashboard", _rel(dash_dir), "skipped", "no such directory")]
    files = sorted(dash_dir.glob("*.json"))
    if not files:
        return [CheckResult("dashboard", _rel(dash_dir), "skipped", "no *.json files")]
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
) -> list[CheckResult]:
    results = [check_config(c) for c in configs]
    results += check_rules(rules_dir, promtool, runner)
    results.append(check_alertmanager(alertmanager, amtool, runner))
    results += check_dashboards(dashboards_dir)
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        action="append",
        type=Path,
        metavar="FILE",
        help=f"fleet file to validate (repeatable; default {_rel(EXAMPLES / 'flash-sale.yaml')})",
    )
    parser.add_argument("--rules", type=Path, metavar="DIR", default=REPO_ROOT / "alertrules" / "rules")
    parser.add_argument(
        "--alertmanager", type=Path, metavar="FILE", help="Alertmanager config (default: alertmanager.yml beside DIR)"
    )
    parser.add_argument("--dashboards", type=Path, metavar="DIR", default=REPO_ROOT / "dashboards" / "generated")
    parser.add_argument("--strict", action="store_true", help="count skipped checks (missing tools or files) as failed")


def run(args: argparse.Namespace) -> int:
    configs = args.config or [EXAMPLES / "flash-sale.yaml"]
    alertmanager = args.alertmanager or args.rules.parent / "alertmanager.yml"
    results = run_checks(
        configs,
        args.rules,
        alertmanager,
        args.dashboards,
        promtool=_tool("promtool"),
        amtool=_tool("amtool"),
    )
    for r in results:
        print(r.line())
    failed = [r for r in results if r.status == "FAILED" or (args.strict and r.status == "skipped")]
    ok = sum(r.status == "ok" for r in results)
    skipped = sum(r.status == "skipped" for r in results)
    print(f"{ok} ok, {sum(r.status == 'FAILED' for r in results)} failed, {skipped} skipped", file=sys.stderr)
    return 1 if failed else 0
