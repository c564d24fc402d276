"""GPU: memory, compute, bandwidth, power and errors per node, and the exporter's sources."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row

from . import queries as q
from .panels import Bands, DashboardSettings, Section, base, compose, share, stat, steps, ts, variable


def gpu(s: DashboardSettings) -> Dashboard:
    return compose(
        base(
            "infercast-gpu",
            "infercast / GPU",
            "GPU memory, compute, bandwidth, power and errors.",
            variable("node", "Node", q.VAR_NODE),
        ),
        _memory_and_compute(s),
        _bandwidth(s),
        _thermals_and_errors(s),
        _sources(s),
    )


def _memory_and_compute(s: DashboardSettings) -> Section:
    return [
        Row("Memory and compute"),
        share(
            "GPU memory used",
            q.GPU_MEMORY,
            description="Framebuffer memory in use / total per GPU (engines pre-allocate their KV pool, so this "
            "stays flat near their memory utilisation).",
        ),
        ts(
            "GPU memory used (bytes)",
            q.GPU_MEMORY_BYTES,
            unit="bytes",
            description="Framebuffer memory in use per GPU.",
        ),
        share(
            "GPU utilization",
            q.GPU_UTILIZATION,
            description="Fraction of time a kernel was running on the GPU (busy, not how much of it).",
        ),
        share(
            "SM occupancy",
            q.GPU_SM_OCCUPANCY,
            description="Warps resident on the SMs / the maximum.",
        ),
    ]


def _bandwidth(s: DashboardSettings) -> Section:
    return [
        Row("Bandwidth"),
        share(
            "HBM bandwidth (DRAM active)",
            q.GPU_HBM,
            description="Fraction of cycles the HBM interface was busy: decode is usually bound here.",
        ),
        ts("PCIe traffic", q.GPU_PCIE_RATE, unit="Bps", description="PCIe bytes per second, per direction."),
    ]


def _thermals_and_errors(s: DashboardSettings) -> Section:
    b = Bands.of(s)
    return [
        Row("Thermals and errors"),
        ts(
            "Temperature",
            q.GPU_TEMPERATURE,
            unit="celsius",
            thresholds=b.temp,
            lo=None,
            description=f"GPU core temperature; red at {s.thresholds.gpu_temperature_celsius:g} C (the fleet "
            "file's gpu_temperature_celsius, InfercastGPUTemperatureHigh).",
        ),
        ts("Power", q.GPU_POWER_DRAW, unit="watt", description="GPU power draw."),
        ts(
            "ECC errors (last hour)",
            q.GPU_ECC_ERRORS,
            unit="short",
            description="ECC memory errors in the last hour, by type; any uncorrectable one pages.",
        ),
        ts(
            "XID errors (last hour)",
            q.GPU_XID_ERRORS,
            unit="short",
            description="Driver XID errors in the last hour, by code (79: fallen off the bus).",
        ),
    ]


def _sources(s: DashboardSettings) -> Section:
    return [
        Row("Sources"),
        stat(
            "Exporter sources up",
            q.TARGETS_UP,
            "none",
            steps((None, "red"), (1, "green")),
            width=12,
            description="1 when the exporter's last scrape of the source succeeded, 0 when it failed.",
        ),
        ts(
            "Scrape duration by source",
            q.SCRAPE_DURATION,
            unit="s",
            description="How long the exporter's last scrape of each source took.",
        ),
        ts(
            "Expected metrics missing by source",
            q.TARGET_METRIC_MISSING,
            unit="none",
            hi=1,
            description="1 while a family the exporter expects is absent from a source's page (a renamed or "
            "removed engine metric: its panels and forecasts go blank); 0 when present.",
        ),
        ts(
            "Families dropped for malformed lines (last hour)",
            q.TARGET_PARSE_ERRORS,
            unit="short",
            description="Families dropped from a source's page for a malformed line in the last hour; the rest "
            "of the source is kept (one warning in the exporter's log names the line).",
        ),
    ]
