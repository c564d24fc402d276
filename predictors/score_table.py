"""Score tables as plain text: one cell per score, columns aligned (names left, numbers right).

Used by `infercast train --from-prometheus` (its held-out report) and by the simulator's backtest report.
"""

from __future__ import annotations

from collections.abc import Sequence


def cell(v: object, nd: int = 4) -> str:
    """A score as a table cell: `-` where there is none, a float to `nd` significant digits, anything else as is."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}g}"
    return str(v)


def aligned(rows: Sequence[Sequence[object]], indent: str = "") -> list[str]:
    """The rows (the first is the header) as lines: the first column left-aligned, the others right-aligned, each
    as wide as its widest cell, two spaces between columns, `indent` before each line."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = (str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        lines.append(indent + "  ".join(cells))
    return lines
