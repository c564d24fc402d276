"""Model files: weights in safetensors, metadata in JSON, side by side (`NAME.safetensors` + `NAME.json`).

No pickle anywhere: safetensors holds only named tensors and JSON only data, so loading a file cannot run code.
The metadata records what a reader needs to trust the weights: the input channels and their scaler, the step,
lookback and horizon, the quantiles, the training range, library versions, scores, and the SHA-256 of the
weights file.  Anything that doesn't add up is refused with `ModelFileError`, which names the file and the
mismatch; the predictor service falls back to the best baseline on that error.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "infercast-lstm"
FORMAT_VERSION = 1
REQUIRED_KEYS = (
    "format",
    "format_version",
    "inputs",
    "series_inputs",
    "covariates",
    "scaler",
    "step_s",
    "lookback",
    "horizon_s",
    "quantiles",
    "hparams",
    "target",
    "training_range",
    "library_versions",
    "scores",
    "weights_sha256",
)


class ModelFileError(Exception):
    """A model file that is missing, corrupt, truncated or doesn't match what the code expects."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"model file {self.path}: {reason}")


def paths(path: Path | str) -> tuple[Path, Path]:
    """(weights, metadata) paths for a model given as its stem or either of its two files."""
    p = Path(path)
    if p.suffix in (".safetensors", ".json"):
        p = p.with_suffix("")
    return p.with_name(p.name + ".safetensors"), p.with_name(p.name + ".json")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def save(path: Path | str, tensors: dict[str, np.ndarray], metadata: dict[str, Any]) -> tuple[Path, Path]:
    """Write weights then metadata (with the weights' hash); returns both paths."""
    from safetensors.numpy import save_file

    wpath, mpath = paths(path)
    wpath.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(wpath), metadata={"format": FORMAT})
    meta = dict(metadata, format=FORMAT, format_version=FORMAT_VERSION, weights_sha256=_sha256(wpath))
    mpath.write_text(json.dumps(meta, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return wpath, mpath


def update_metadata(path: Path | str, updates: dict[str, Any]) -> Path:
    """Replace top-level metadata keys of an existing model file without touching its weights (e.g. to store a
    band calibration).  The weights' hash is checked first, so this never re-labels another model's weights."""
    wpath, mpath = paths(path)
    meta = json.loads(mpath.read_text())
    if _sha256(wpath) != meta.get("weights_sha256"):
        raise ModelFileError(wpath, "weights don't match the metadata's SHA-256; refusing to update the metadata")
    meta.update(updates)
    mpath.write_text(json.dumps(meta, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return mpath


def load(
    path: Path | str, expect_inputs: tuple[str, ...], expect_series_inputs: tuple[str, ...]
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read and check a model file; returns (tensors, metadata) or raises ModelFileError."""
    wpath, mpath = paths(path)
    if not mpath.is_file():
        raise ModelFileError(mpath, "metadata file is missing")
    if not wpath.is_file():
        raise ModelFileError(wpath, "weights file is missing")
    try:
        meta = json.loads(mpath.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFileError(mpath, f"metadata is not valid JSON ({e})") from e
    if not isinstance(meta, dict):
        raise ModelFileError(mpath, "metadata is not a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in meta]
    if missing:
        raise ModelFileError(mpath, f"metadata lacks {', '.join(missing)}")
    if meta["format"] != FORMAT:
        raise ModelFileError(mpath, f"format is {meta['format']!r}, expected {FORMAT!r}")
    if meta["format_version"] != FORMAT_VERSION:
        raise ModelFileError(mpath, f"format_version {meta['format_version']!r}, this code reads {FORMAT_VERSION}")
    if tuple(meta["inputs"]) != tuple(expect_inputs):
        raise ModelFileError(
            mpath, f"inputs {meta['inputs']} don't match this code's {list(expect_inputs)} (retrain the model)"
        )
    if tuple(meta["series_inputs"]) != tuple(expect_series_inputs):
        raise ModelFileError(
            mpath,
            f"series_inputs {meta['series_inputs']} don't match this code's {list(expect_series_inputs)}",
        )
    for key in ("step_s", "horizon_s"):
        v = meta[key]
        if not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise ModelFileError(mpath, f"{key} must be a positive number, got {v!r}")
    if not isinstance(meta["lookback"], int) or meta["lookback"] < 2:
        raise ModelFileError(mpath, f"lookback must be an integer >= 2, got {meta['lookback']!r}")
    q = meta["quantiles"]
    if not (isinstance(q, list) and len(q) == 3 and q == sorted(q) and all(0 < float(v) < 1 for v in q)):
        raise ModelFileError(mpath, f"quantiles must be three increasing numbers in (0, 1), got {q!r}")
    sc = meta["scaler"]
    for key, n in (("x_mean", len(expect_inputs)), ("x_std", len(expect_inputs))):
        if not isinstance(sc, dict) or len(sc.get(key, [])) != n:
            raise ModelFileError(mpath, f"scaler.{key} must have {n} values (one per input)")
    if any(not (isinstance(v, int | float) and v > 0) for v in sc["x_std"]):
        raise ModelFileError(mpath, "scaler.x_std must be positive")
    digest = _sha256(wpath)
    if digest != meta["weights_sha256"]:
        raise ModelFileError(
            wpath,
            f"weights SHA-256 {digest[:12]}... doesn't match the metadata's {str(meta['weights_sha256'])[:12]}... "
            "(file truncated, corrupted or from another model)",
        )
    try:
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        tensors = load_file(str(wpath))
    except (SafetensorError, OSError, ValueError) as e:
        raise ModelFileError(wpath, f"weights are not a readable safetensors file ({e})") from e
    for name, arr in tensors.items():
        if not np.all(np.isfinite(arr)):
            raise ModelFileError(wpath, f"tensor {name} holds NaN or infinite values")
    return tensors, meta
