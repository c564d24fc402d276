"""A `query_range` answer (Prometheus' JSON) -> numpy arrays, without a Python object per sample.

`json.loads` of a matrix answer builds a list, an int and a string per sample (10,000 series x 240 points: 4.8
million objects, seconds of work), which the store then converted one by one.  `parse_matrix` instead cuts every
`"values":[...]` array out of the body as bytes, parses what is left (the envelope and the label sets: small) with
`json`, and reads all the arrays' numbers in one `np.fromstring` call (C), the counts telling which numbers belong to
which series.  Sample values are JSON strings ("0.5", "NaN", "+Inf", "-Inf"): numpy reads all of them.

The fast path accepts only what it can check: every cut array must hold `[number,"number"]` pairs only, each series'
point count must add up, the envelope must parse.  Anything else (an error answer, a body that is not JSON, an odd
shape) goes through plain `json.loads`, and `matrix_series` then checks it value by value, so a malformed answer
gives the same clear error as before and never a half-read one.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from typing import Any

import numpy as np

_KEY = b'"values":['
_PLACEHOLDER = b'"values":0'
# every byte a values array may hold: the pairs' brackets, quotes and commas, numbers, NaN and (+/-)Inf
_ALLOWED = b'0123456789eE.+-naNIif[]",'
_STRIP = b'[]"'


class _Cut:
    """Placeholder for one series' values in the parsed envelope: (times, values) arrays."""

    __slots__ = ("t", "v")

    def __init__(self, t: np.ndarray, v: np.ndarray) -> None:
        self.t, self.v = t, v


def parse_body(body: bytes) -> Any:
    """The answer's JSON, with each `values` array of a matrix as a (t, v) pair of float arrays when it could be
    read fast (see the module docstring), else as `json.loads` gives it.  ValueError: the body is not JSON."""
    try:
        fast = _fast(body)
    except (ValueError, IndexError):
        fast = None
    if fast is not None:
        return fast
    return json.loads(body)


def _fast(body: bytes) -> Any | None:
    pieces = body.split(_KEY)
    if len(pieces) < 2:
        return None  # no matrix samples here (an error, a vector, an empty result): plain JSON is cheap
    skeleton = [pieces[0]]
    blocks: list[bytes] = []
    for p in pieces[1:]:
        j = -1 if p[:1] == b"]" else p.find(b"]]")  # -1: an empty array
        if j < 0 and p[:1] != b"]":
            return None
        blocks.append(p[: j + 1])
        skeleton.append(p[j + 2 :])
    # every array becomes the placeholder 0; the k-th series of the result is the k-th array cut (the body's order)
    doc = json.loads(_PLACEHOLDER.join(skeleton))
    result = doc.get("data", {}).get("result") if isinstance(doc, dict) else None
    if not isinstance(result, list) or len(result) != len(blocks):
        return None
    # the point count of each block: pairs are separated by "],["
    counts = [b.count(b"],[") + 1 if b else 0 for b in blocks]
    text = b",".join(b for b in blocks if b)
    if text.translate(None, _ALLOWED):  # anything else left: not a plain array of samples
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns (and stops) at text it cannot read: that is not a fast case
        flat = np.fromstring(text.translate(None, _STRIP).decode("ascii"), sep=",") if text else np.zeros(0)
    ends = list(itertools.accumulate(counts))
    if flat.size != 2 * (ends[-1] if ends else 0):
        return None
    times = flat[0::2]
    rising = np.diff(times) > 0
    bounds = np.asarray([e for c, e in zip(counts, ends, strict=True) if c and e < len(times)], dtype=np.int64)
    rising[bounds - 1] = True  # a series' first time is not after the previous series' last
    if not (np.isfinite(times).all() and rising.all()):
        return None  # a time that is not a number, or out of order: read one by one (which says which)
    values = flat[1::2]
    for k, item in enumerate(result):
        if not isinstance(item, dict) or item.get("values", None) != 0:
            return None  # not the k-th array where it was cut from: the shape is not what the fast path knows
        a, b = ends[k] - counts[k], ends[k]
        item["values"] = _Cut(times[a:b], values[a:b])
    return doc


def matrix_series(item: dict, error: type[Exception]) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) of one result item, from either parse; `error(message)` when its values cannot be read."""
    raw = item.get("values", [])
    if isinstance(raw, _Cut):
        return raw.t, raw.v  # checked in `_fast`, for every series at once: finite times, rising
    else:
        if not isinstance(raw, list):
            raise error(f"expected a list of samples, got {type(raw).__name__}")
        t = np.empty(len(raw))
        v = np.empty(len(raw))
        for i, pair in enumerate(raw):
            if not isinstance(pair, list | tuple) or len(pair) != 2:
                raise error(f"expected a [time, value] pair, got {pair!r:.80}")
            t[i] = _number(pair[0], "sample time", error)
            v[i] = _number(pair[1], "sample value", error)
        if not np.isfinite(t).all():
            raise error(f"unparseable sample time in {t[~np.isfinite(t)][:3].tolist()}")
    if len(t) > 1 and not (np.diff(t) > 0).all():
        # out of order or repeated: keep each point newer than every one before it (what the store always did)
        keep = np.concatenate([[True], t[1:] > np.maximum.accumulate(t)[:-1]])
        t, v = t[keep], v[keep]
    return t, v


def _number(x: object, what: str, error: type[Exception]) -> float:
    # The API writes values as strings, "NaN", "+Inf" and "-Inf" included; times as numbers.
    if isinstance(x, bool):
        raise error(f"unparseable {what} {x!r}")
    try:
        f = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise error(f"unparseable {what} {x!r:.40}") from None
    if what == "sample time" and not math.isfinite(f):
        raise error(f"unparseable {what} {x!r:.40}")
    return f


__all__ = ["matrix_series", "parse_body"]
