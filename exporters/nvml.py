"""NVML (the GPU driver's library, through `pynvml` from the nvidia-ml-py package) to the catalog's GPU families.

Per GPU: memory used/total, utilisation (% -> ratio), temperature, power (mW -> W), PCIe throughput (KB/s, passed
on as a rate that `infercast.exporters.windows` integrates into `infercast_gpu_pcie_bytes_total`), volatile ECC error
counts (corrected / uncorrected) and XID errors (NVML delivers them as events: every event drained on a scrape adds one
to `infercast_gpu_xid_errors_total{xid}`).  A query a card does not support (ECC on consumer cards) is left absent.

The `pynvml` module is injected (tests pass a small fake); without a driver `NvmlSource.collect` raises
`ScrapeError` once per scrape, the exporter reports `infercast_target_up{kind="nvml"} 0` and logs the reason once,
and the rest of the exporter keeps running.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from types import ModuleType

from infercast.catalog import (
    GPU_ECC_ERRORS_TOTAL,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USED_BYTES,
    GPU_POWER_WATTS,
    GPU_TEMPERATURE_CELSIUS,
    GPU_UTILIZATION_RATIO,
    GPU_XID_ERRORS_TOTAL,
)
from infercast.exporters.base import PCIE_RATE, Emitter, Sample, ScrapeError

log = logging.getLogger(__name__)


def _load_pynvml() -> ModuleType:
    import pynvml  # nvidia-ml-py; imported lazily so the exporter runs without it

    return pynvml


def find_gpus(nvml: ModuleType | None = None) -> tuple[int, str | None]:
    """How many GPUs NVML sees on this node, and why none when 0 (pynvml missing, no driver, no device).

    `infercast exporter` reads GPUs through NVML only when this finds one (or `--nvml` asks): on a host without
    GPUs an NVML source is a permanent `infercast_target_up{kind="nvml"} 0` and a `InfercastTargetDown` that never
    clears (issue 38 item 3)."""
    try:
        nv = nvml if nvml is not None else _load_pynvml()
    except ImportError:
        return 0, "pynvml is not installed (the `gpu` extra: nvidia-ml-py)"
    try:
        nv.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return 0, f"no NVIDIA driver ({e})"
    try:
        n = int(nv.nvmlDeviceGetCount())
    except Exception as e:
        return 0, f"NVML could not count the GPUs ({e})"
    finally:
        with contextlib.suppress(Exception):  # an older or fake pynvml without it, or already shut down
            nv.nvmlShutdown()
    return n, None if n else "NVML sees no GPU"


class NvmlSource:
    """Reads every GPU of this node through NVML; initialises lazily and retries after a failure."""

    kind = "nvml"

    def __init__(self, nvml: ModuleType | None = None, node: str | None = None, name: str = "nvml") -> None:
        self.name = name
        self.node = node or socket.gethostname()
        self._nvml = nvml
        self._lock = threading.Lock()
        self._ready = False
        self._events = None
        self._xid_counts: dict[tuple[int, int], int] = {}  # (gpu index, xid) -> count

    def now(self) -> float:
        return time.monotonic()

    def _init(self) -> ModuleType:
        if self._nvml is None:
            try:
                self._nvml = _load_pynvml()
            except ImportError as e:
                raise ScrapeError(f"NVML unavailable: pynvml is not installed ({e})") from None
        nv = self._nvml
        if not self._ready:
            try:
                nv.nvmlInit()
            except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
                raise ScrapeError(f"NVML unavailable: {e}") from None
            self._ready = True
            self._events = self._register_xid_events(nv)
        return nv

    def _register_xid_events(self, nv: ModuleType):
        try:
            events = nv.nvmlEventSetCreate()
            for i in range(nv.nvmlDeviceGetCount()):
                nv.nvmlDeviceRegisterEvents(nv.nvmlDeviceGetHandleByIndex(i), nv.nvmlEventTypeXidCriticalError, events)
            return events
        except Exception as e:
            log.info("NVML: XID events not available (%s); %s stays absent", e, GPU_XID_ERRORS_TOTAL)
            return None

    def _drain_xids(self, nv: ModuleType, index_of: dict[str, int]) -> None:
        if self._events is None:
            return
        for _ in range(1000):  # bounded: never stall a scrape
            try:
                ev = nv.nvmlEventSetWait_v2(self._events, 0)
            except Exception:  # NVMLError_Timeout: no more events
                return
            try:
                gpu = index_of.get(_text(nv.nvmlDeviceGetUUID(ev.device)), -1)
            except Exception:
                gpu = -1
            key = (gpu, int(ev.eventData))
            self._xid_counts[key] = self._xid_counts.get(key, 0) + 1

    def collect(self) -> list[Sample]:
        """One reading of every GPU (catalog samples plus PCIe rates for the windows stage)."""
        with self._lock:
            nv = self._init()
            try:
                return self._read(nv)
            except ScrapeError:
                raise
            except Exception as e:
                self._ready = False  # re-initialise on the next scrape (driver reloaded, GPU fell off the bus)
                raise ScrapeError(f"NVML query failed: {e}") from None

    def _read(self, nv: ModuleType) -> list[Sample]:
        out = Emitter()
        gpus: list[tuple[int, dict[str, str], object]] = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            gpus.append((i, {"node": self.node, "gpu": str(i), "uuid": _text(nv.nvmlDeviceGetUUID(h))}, h))
        self._drain_xids(nv, {labels["uuid"]: i for i, labels, _ in gpus})
        for i, labels, h in gpus:
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            out.add(GPU_MEMORY_USED_BYTES, labels, mem.used)
            out.add(GPU_MEMORY_TOTAL_BYTES, labels, mem.total)
            out.add(GPU_UTILIZATION_RATIO, labels, nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0)
            out.add(GPU_TEMPERATURE_CELSIUS, labels, nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
            out.add(GPU_POWER_WATTS, labels, nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
            for counter, direction in ((nv.NVML_PCIE_UTIL_TX_BYTES, "tx"), (nv.NVML_PCIE_UTIL_RX_BYTES, "rx")):
                kbps = _optional(nv, lambda h=h, c=counter: nv.nvmlDeviceGetPcieThroughput(h, c))
                out.add(PCIE_RATE, {**labels, "direction": direction}, None if kbps is None else kbps * 1024.0)
            for etype, kind in (
                (nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, "correctable"),
                (nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, "uncorrectable"),
            ):
                n = _optional(nv, lambda h=h, e=etype: nv.nvmlDeviceGetTotalEccErrors(h, e, nv.NVML_VOLATILE_ECC))
                out.add(GPU_ECC_ERRORS_TOTAL, {**labels, "type": kind}, n)
            for (gpu, xid), n in sorted(self._xid_counts.items()):
                if gpu == i:
                    out.add(GPU_XID_ERRORS_TOTAL, {**labels, "xid": str(xid)}, n)
        return out.samples


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _optional(nv: ModuleType, call):
    """A query the card does not support gives None (the series stays absent); other errors propagate."""
    try:
        return call()
    except nv.NVMLError_NotSupported:
        return None
