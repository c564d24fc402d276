"""Where the files infercast ships live, in a checkout and installed alike: the example fleet files, the generated
alert rules and dashboards, the runbooks and templates, the model files.

Each is package data of the subpackage that owns it (pyproject.toml, `package-data`), found where the import system
would load that package from (its spec, without importing it: the rules' folder is found without loading the rule
code), so every command works from any directory after `pip install infercast`.  Not through
`importlib.resources.files`: `infercast.examples` is a data-only (namespace) package, for which it returns a
multiplexed path rather than a directory; a wheel installs unzipped, so the package's directory is all we need.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_dir(package: str) -> Path:
    """The directory a package of the distribution is imported from, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"no package named {package!r}", name=package)
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def examples_dir() -> Path:
    """The example fleet files (`examples/` in the repository): flash-sale.yaml, kubernetes.yaml, ..."""
    return package_dir("infercast.examples")


def example_fleet(name: str = "flash-sale") -> Path:
    """An example fleet file by its name, `flash-sale` -> .../flash-sale.yaml (the scenarios of `--scenario`)."""
    return examples_dir() / f"{name}.yaml"


def rules_dir() -> Path:
    """The alert and recording rules as generated from the flash-sale fleet file (`alertrules/rules/`)."""
    return package_dir("infercast.alertrules") / "rules"


def dashboards_dir() -> Path:
    """The generated Grafana dashboards (`dashboards/generated/`)."""
    return package_dir("infercast.dashboards") / "generated"


def checkout() -> Path | None:
    """The repository root when infercast runs from a checkout (editable or on PYTHONPATH), None when installed.

    Only the commands that work on the repository's own files need one: those that rewrite its committed files
    (`python -m infercast.alertrules.generate` and `infercast k8s build` without `--out`) and `infercast k8s validate`
    (the CRD schemas and validators vendored under deploy/kubernetes/crds)."""
    import infercast

    return infercast.CHECKOUT


#: why a command needs a checkout, when it does not say otherwise
REWRITES = "without --out this rewrites the committed files of an infercast checkout"


def require_checkout(command: str, needs: str = REWRITES, instead: str = "give --out DIR") -> Path:
    """`checkout()`, or a clear error for a command that works on a checkout's own files."""
    root = checkout()
    if root is None:
        raise SystemExit(f"{command}: {needs}, and this infercast is installed, not a checkout: {instead}")
    return root
