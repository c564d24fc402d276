"""The files a run leaves: JSON that holds numpy values, and time series as CSV.

`infercast twin run --out DIR` and `infercast demo --out DIR` write theirs with these, so a summary, an events list
or a time series reads the same whichever command wrote it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def json_default(o: Any) -> Any:
    """What `json.dumps` cannot write by itself: numpy scalars (NaN as null: JSON has no NaN), sets (sorted),
    tuples and paths.  Anything else is a bug in the caller: TypeError, not a silent `str()`."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return None if math.isnan(o) else float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, set | frozenset):
        return sorted(o)
    if isinstance(o, tuple):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot write a {type(o).__name__} as JSON")


def to_json(obj: Any, indent: int = 2) -> str:
    return json.dumps(obj, indent=indent, default=json_default)


def write_json(path: Path, obj: Any, indent: int = 2) -> Path:
    path.write_text(to_json(obj, indent) + "\n")
    return path


def write_run(out: Path, timeseries: pd.DataFrame, events: list[dict], **frames: pd.DataFrame | None) -> Path:
    """DIR/timeseries.csv, DIR/events.json and DIR/NAME.csv for each non-empty frame given; returns the time
    series' path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "timeseries.csv"
    timeseries.to_csv(path, index=False)
    for name, frame in frames.items():
        if frame is not None and not frame.empty:
            frame.to_csv(out / f"{name}.csv", index=False)
    write_json(out / "events.json", events, indent=1)
    return path
