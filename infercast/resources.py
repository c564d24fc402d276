"""Where the files infercast ships live, in a checkout and installed alike: the example fleet files, the generated
alert rules and dashboards, the runbooks and templates, the model files.

Each is package data of the subpackage that owns it (pyproject.toml, `package-data`), found from that package's
import location, so every command works from any directory after `pip install infercast`.  Not through
`importlib.resources.files`: `infercast.examples` is a data-only (namespace) package, for which it returns a
multiplexed path rather than a directory; a wheel installs unzipped, so the package's directory is all we need.
"""

from __future__ import annotations

import importlib
from pathlib import Path


def package_dir(package: str) -> Path:
    """The directory a package of the distribution was imported from."""
    return Path(next(iter(importlib.import_module(package).__path__))).resolve()


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

    Only the commands that rewrite the repository's committed files (`python -m infercast.alertrules.generate`
    without `--out`, `infercast k8s build` without `--out`) need one."""
    root = package_dir("infercast").parent
    return root if (root / "pyproject.toml").is_file() and (root / "exporters" / "__init__.py").is_file() else None


def require_checkout(command: str) -> Path:
    """`checkout()`, or a clear error for a command that writes the committed files of a repository."""
    root = checkout()
    if root is None:
        raise SystemExit(
            f"{command}: without --out this rewrites the committed files of an infercast checkout, and this "
            "infercast is installed, not a checkout: give --out DIR"
        )
    return root
