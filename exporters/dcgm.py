"""NVIDIA dcgm-exporter `/metrics` to the catalog's GPU families.

Per GPU (labels `node`, `gpu`, `uuid`, plus the `pod`, `namespace` and `container` that dcgm-exporter attaches
when it maps GPUs to Kubernetes pods):

| dcgm-exporter field | catalog |
|---|---|
| `DCGM_FI_DEV_FB_USED` (MiB) | `infercast_gpu_memory_used_bytes` (x 2^20) |
| `DCGM_FI_DEV_FB_USED + _FREE (+ _RESERVED)` | `infercast_gpu_memory_total_bytes` |
| `DCGM_FI_DEV_GPU_UTIL` (%) | `infercast_gpu_utilization_ratio` (/ 100) |
| `DCGM_FI_PROF_SM_OCCUPANCY`, `DCGM_FI_PROF_DRAM_ACTIVE` (ratios) | `..._sm_occupancy_ratio`, `..._dram_active_ratio` |
| `DCGM_FI_PROF_PCIE_TX/RX_BYTES` (bytes/s) | `infercast_gpu_pcie_bytes_total{direction}`, integrated |
| `DCGM_FI_DEV_GPU_TEMP`, `DCGM_FI_DEV_POWER_USAGE` | `..._temperature_celsius`, `..._power_watts` |
| `DCGM_FI_DEV_ECC_SBE/DBE_VOL_TOTAL` | `infercast_gpu_ecc_errors_total{type="correctable"/"uncorrectable"}` |
| `DCGM_FI_DEV_XID_ERRORS` (last XID, a gauge) | `infercast_gpu_xid_errors_total{xid}`, counting changes |

The PCIe rates and the last-XID gauge need the previous scrape, so `parse` passes them on as internal samples and
`infercast.exporters.windows` integrates the rates (rate x elapsed time, trapezoid) and counts XID changes.
The node is the `Hostname` label (renamed `hostname` on dcgm-exporter's main branch; both are read), else the
target's `node`, else the target name.
"""

from __future__ import annotations

from infercast.catalog import (
    GPU_DRAM_ACTIVE_RATIO,
    GPU_ECC_ERRORS_TOTAL,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USED_BYTES,
    GPU_POWER_WATTS,
    GPU_SM_OCCUPANCY_RATIO,
    GPU_TEMPERATURE_CELSIUS,
    GPU_UTILIZATION_RATIO,
)
from infercast.exporters.base import PCIE_RATE, XID_LAST, Emitter, Raw, Sample, ScrapeError, Target, parse_text

MIB = 1024**2
FB_USED, FB_FREE, FB_RESERVED = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
SM_OCC, DRAM = "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_DRAM_ACTIVE"
PCIE_TX, PCIE_RX = "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"
TEMP, POWER = "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"
SBE, DBE = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
XID = "DCGM_FI_DEV_XID_ERRORS"
WANTED = frozenset((FB_USED, FB_FREE, FB_RESERVED, UTIL, SM_OCC, DRAM, PCIE_TX, PCIE_RX, TEMP, POWER, SBE, DBE, XID))
KEPT = ("pod", "namespace", "container")
#: ranges: utilisation is a percentage, the profiling fields are ratios
MAXIMA = {UTIL: 100.0, SM_OCC: 1.0, DRAM: 1.0}
#: the families a dcgm-exporter page must have (the profiling fields are not on by default)
EXPECTED = ((FB_USED,), (FB_FREE,), (UTIL,), (TEMP,), (POWER,))

#: (dcgm field, catalog name, scale) for the plain gauges
GAUGES = (
    (UTIL, GPU_UTILIZATION_RATIO, 0.01),
    (SM_OCC, GPU_SM_OCCUPANCY_RATIO, 1.0),
    (DRAM, GPU_DRAM_ACTIVE_RATIO, 1.0),
    (TEMP, GPU_TEMPERATURE_CELSIUS, 1.0),
    (POWER, GPU_POWER_WATTS, 1.0),
)


def gpu_labels(labels: dict[str, str], target: Target) -> tuple[tuple[str, str], ...]:
    node = labels.get("Hostname") or labels.get("hostname") or target.node or target.name
    out = [("node", node), ("gpu", labels.get("gpu", "")), ("uuid", labels.get("UUID", labels.get("uuid", "")))]
    out += [(k, labels[k]) for k in KEPT if k in labels]
    return tuple(out)


def parse(text: str, target: Target) -> list[Sample]:
    return build(parse_text(text, WANTED, MAXIMA), target)


def build(raw: Raw, target: Target) -> list[Sample]:
    """The samples of the families read (`parse_text(text, WANTED, MAXIMA)`) -> catalog samples."""
    if not raw:
        raise ScrapeError("no DCGM fields in the body (is this dcgm-exporter's /metrics?)")
    by_gpu: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
    for field, rows in raw.items():
        for labels, value in rows:
            fields = by_gpu.setdefault(gpu_labels(labels, target), {})
            if field in fields:
                raise ScrapeError(f"duplicate series {field} for GPU {dict(gpu_labels(labels, target))}")
            fields[field] = value
    out = Emitter()
    for key in sorted(by_gpu):
        f = by_gpu[key]
        labels = dict(key)
        if FB_USED in f:
            out.add(GPU_MEMORY_USED_BYTES, labels, f[FB_USED] * MIB)
            if FB_FREE in f:
                out.add(GPU_MEMORY_TOTAL_BYTES, labels, (f[FB_USED] + f[FB_FREE] + f.get(FB_RESERVED, 0.0)) * MIB)
        for field, name, scale in GAUGES:
            if field in f:
                out.add(name, labels, f[field] * scale)
        for field, direction in ((PCIE_TX, "tx"), (PCIE_RX, "rx")):
            if field in f:
                out.add(PCIE_RATE, {**labels, "direction": direction}, f[field])
        for field, kind in ((SBE, "correctable"), (DBE, "uncorrectable")):
            if field in f:
                out.add(GPU_ECC_ERRORS_TOTAL, {**labels, "type": kind}, f[field])
        if XID in f:
            out.add(XID_LAST, labels, f[XID])
    return out.samples
