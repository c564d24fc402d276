"""infercast as a user installs it: the wheel built from this checkout, installed into a fresh virtual environment
outside it, run from an empty directory with no checkout on the path.

What a user sees: `pip install infercast` puts one package, `infercast`, into site-packages (the product's folders
are its subpackages, nothing generic like `exporters`), and every command finds the files it ships (the example
fleet files, rules, dashboards, model files) without a checkout: `infercast check` passes on them, the twin runs
the flash sale by its name and the exporter scrapes it once.

The dependencies are this environment's (the pins of constraints.txt, which scripts/install.sh installed): their
site-packages is put on the new environment's path, not as a site directory, so the checkout's editable install
(a `.pth` hook there) is not seen.  Only the wheel's own files are new; that is what this test is about.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from infercast.catalog import KV_CACHE_USAGE_RATIO
from tests.conftest import REPO

pytestmark = pytest.mark.slow

#: what a wheel is built from: the files the images copy (.dockerignore lets exactly these through)
SOURCES = [line[1:] for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"  # a copy: building in the checkout would leave build/ and *.egg-info in it
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "tests"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", work / "dist", src],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    (wheel,) = (work / "dist").glob("infercast-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel],
        check=True,
        capture_output=True,
        timeout=600,
    )
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    new_files = sorted(p.name for p in site.iterdir())
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    empty = work / "empty"
    empty.mkdir()
    return {"bin": venv / "bin", "site": site, "new_files": new_files, "cwd": empty, "build_log": build.stderr}


def run(installed: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{installed['bin']}:{env.get('PATH', '')}"
    return subprocess.run(
        [installed["bin"] / "infercast", *args],
        cwd=installed["cwd"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_wheel_installs_one_package_named_infercast(installed):
    packages = [n for n in installed["new_files"] if not n.endswith(".dist-info") and n != "__pycache__"]
    assert packages == ["infercast"], packages
    shipped = installed["site"] / "infercast"
    for sub in ("exporters", "predictors", "alertrules", "dashboards", "actuators", "simulator/twin", "tools"):
        assert (shipped / sub / "__init__.py").is_file(), sub
    # the two layers as folders: the simulator in one package, nothing of it left at its old places
    for old in ("twin", "demo", "lab", "k8s", "traces.py", "cli.py", "actuators/arms.py", "exporters/twin.py"):
        assert not (shipped / old).exists(), old
    # the data the commands open: fleet files, rules by their real suffix, runbooks, templates, dashboards, model
    for data in (
        "examples/flash-sale.yaml",
        "alertrules/rules/alerts.yml",
        "alertrules/rules/engines/engines.yml",
        "alertrules/alertmanager.yml",
        "alertrules/runbooks/InfercastKVCacheForecastBreach.md",
        "alertrules/templates/infercast.tmpl",
        "dashboards/generated/kv-cache-health.json",
        "predictors/models/lstm_kv.safetensors",
    ):
        assert (shipped / data).is_file(), data


def test_the_build_lists_every_folder_it_ships(installed):
    # a data folder left out of pyproject's packages still ships, with a warning that it "would be ignored"
    assert "would be ignored" not in installed["build_log"], installed["build_log"][-2000:]


def test_the_version_comes_from_the_installed_metadata(installed):
    r = run(installed, "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"infercast {metadata_version()}"


def metadata_version() -> str:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_check_passes_on_the_shipped_files_from_an_empty_directory(installed):
    r = run(installed, "check")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert not [ln for ln in lines if ln.startswith("FAILED")]
    # every default it checked is the installed copy, not a checkout
    for what in ("flash-sale.yaml", "alerts.yml", "recording.yml", "alertmanager.yml", "kv-cache-health.json"):
        (line,) = [ln for ln in lines if ln.rstrip().split()[2].endswith(what) or f"/{what}:" in ln]
        assert str(installed["site"]) in line, line


def test_the_simulators_commands_answer_help_outside_the_checkout(installed):
    """The command line reaches the simulator's commands through real imports (infercast/tools/cli.py): installed,
    `infercast demo --help` and `infercast twin run --help` load them from the wheel."""
    for args in (("demo", "--help"), ("twin", "run", "--help"), ("backtest", "--help"), ("lab", "--help")):
        r = run(installed, *args)
        assert r.returncode == 0 and "usage: infercast" in r.stdout, (args, r.stderr[-2000:])


def test_the_twin_runs_the_flash_sale_by_name(installed):
    r = run(installed, "twin", "run", "--scenario", "flash-sale", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["control"] == "none" and summary["simulated_seconds"] == 1800.0
    assert summary["goodput_rps"] > 0


def test_the_exporter_scrapes_the_example_fleet_once(installed):
    r = run(installed, "exporter", "--config", "flash-sale", "--once", "--no-nvml")
    assert r.returncode == 0, r.stderr
    assert any(ln.startswith(KV_CACHE_USAGE_RATIO + "{") for ln in r.stdout.splitlines())


def test_a_command_that_rewrites_the_checkout_refuses_clearly_when_installed(installed):
    out = installed["cwd"] / "rules"
    r = run(installed, "k8s", "build")
    assert r.returncode != 0 and "give --out DIR" in r.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    gen = subprocess.run(
        [installed["bin"] / "python", "-m", "infercast.alertrules.generate", "--out", out],
        cwd=installed["cwd"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert gen.returncode == 0, gen.stderr
    assert (out / "alerts.yml").is_file()


def test_validate_says_it_needs_a_checkout_when_installed(installed):
    r = run(installed, "k8s", "validate")
    assert r.returncode != 0
    assert "vendored in an infercast checkout" in r.stderr and "Traceback" not in r.stderr


def _readme_install_block() -> str:
    text = (REPO / "README.md").read_text()
    block = text.split("<!-- test: wheel-install -->", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert "## Installed as a package" in text.split("<!-- test: wheel-install -->", 1)[0]
    return block


def test_the_readmes_install_takes_torch_from_the_cpu_index_pinned_in_constraints():
    """Issue 38 item 6: `pip install 'infercast[ml]'` pulled a CUDA torch (2.14.1+cu130, a 5.9 GB venv).  The README's
    commands install torch first from the CPU index at the pin of constraints.txt (the one place it is pinned)."""
    lines = [ln.split("#")[0].split() for ln in _readme_install_block().splitlines() if ln.startswith("pip ")]
    torch_line, extra_line = lines
    assert torch_line[:5] == ["pip", "install", "-c", "constraints.txt", "torch"]
    assert torch_line[-2:] == ["--index-url", "https://download.pytorch.org/whl/cpu"]
    assert extra_line[:4] == ["pip", "install", "-c", "constraints.txt"]
    pins = [ln for ln in (REPO / "constraints.txt").read_text().splitlines() if ln.startswith("torch==")]
    assert len(pins) == 1
    assert "torch" not in (REPO / "pyproject.toml").read_text().split("[project.optional-dependencies]")[0]


@pytest.mark.timeout(1800)
def test_the_demo_runs_from_the_wheel_with_the_extra_the_readme_names(installed, tmp_path):
    """The installed wheel's `infercast demo` (a short sale: three arms, 10 minutes simulated) writes its report.  The
    extra is the one the README's install names; the wheel declares it, and what it carries imports there (the demo
    checks that itself before any arm runs: tests/demo/test_demo_explains.py)."""
    import yaml

    (extra,) = [w.split("[")[1].split("]")[0] for w in _readme_install_block().split() if w.startswith("'.[")]
    assert extra == "demo"
    (dist_info,) = [n for n in installed["new_files"] if n.endswith(".dist-info")]
    metadata = (installed["site"] / dist_info / "METADATA").read_text()
    assert f"Provides-Extra: {extra}" in metadata
    code = "from infercast.simulator.demo.cli import DEFAULT_ARMS, missing; print(missing(DEFAULT_ARMS))"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = subprocess.run([installed["bin"] / "python", "-c", code], capture_output=True, text=True, cwd=installed["cwd"],
                       env=env, timeout=300)  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
    data = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    sc = data["scenario"]
    sc["duration_seconds"] = 600
    phases = sc["streams"][0]["phases"]
    phases[1]["start_seconds"], phases[2]["start_seconds"] = 300, 480
    scenario = tmp_path / "short-sale.yaml"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "demo"
    r = run(installed, "demo", "--scenario", str(scenario), "--arms", "none,scheduled,predictive", "--out", str(out),
            "--no-progress", timeout=1500)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["arms"]) == ["none", "scheduled", "predictive"]
    page = (out / "report.html").read_text()
    assert "<svg" in page and "offered" in page
    assert "Traceback" not in r.stderr and "matplotlib" not in r.stderr  # no stray INFO line of the plotting library
