"""infercast: observability, forecasting and predictive alerting for LLM inference fleets.

The product's parts are `infercast.exporters`, `infercast.predictors`, `infercast.alertrules`,
`infercast.dashboards` and `infercast.actuators`.  In the repository they are the top-level folders of the same
names (the layout the project's users asked for); `pyproject.toml` maps each folder into this package when it is
installed, so nothing but `infercast` lands in site-packages.  In a checkout that is not installed (a worktree on
`PYTHONPATH`, `python bench/...`) the line below gives the same names: the folders beside this package are searched
as its subpackages.
"""

from importlib import metadata
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
#: the repository root when this is a checkout (editable or on PYTHONPATH), None when installed
CHECKOUT: Path | None = (
    _ROOT if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "exporters" / "__init__.py").is_file() else None
)
if CHECKOUT is not None:
    __path__.append(str(CHECKOUT))

try:
    #: The one place the version is written is pyproject.toml; this reads what pip installed.
    __version__ = metadata.version("infercast")
except metadata.PackageNotFoundError:  # a checkout that was never installed
    __version__ = "0.0.0+checkout"
