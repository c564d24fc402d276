"""NVML through an injected fake pynvml: every GPU family, unsupported queries absent, and no driver at all."""

from __future__ import annotations

import pytest

from infercast.exporters.base import ScrapeError
from infercast.exporters.nvml import NvmlSource
from tests.exporters.fakes import fake_pynvml


def one(samples, name, **labels):
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_reads_every_gpu():
    src = NvmlSource(fake_pynvml(gpus=2, xids=[(1, 79)]), node="n7")
    s = src.collect()
    assert one(s, "infercast_gpu_memory_used_bytes", node="n7", gpu="1", uuid="GPU-fake-1") == 31 * 2**30
    assert one(s, "infercast_gpu_memory_total_bytes", gpu="0") == 80 * 2**30
    assert one(s, "infercast_gpu_utilization_ratio", gpu="0") == 0.87
    assert one(s, "infercast_gpu_temperature_celsius", gpu="1") == 72
    assert one(s, "infercast_gpu_power_watts", gpu="0") == 412.5
    assert one(s, "_gpu_pcie_bytes_per_second", gpu="0", direction="rx") == 2000 * 1024
    assert one(s, "infercast_gpu_ecc_errors_total", gpu="0", type="correctable") == 3
    assert one(s, "infercast_gpu_xid_errors_total", gpu="1", xid="79") == 1
    # XIDs are events: counted once, kept as a counter on later scrapes
    assert one(src.collect(), "infercast_gpu_xid_errors_total", gpu="1", xid="79") == 1


def test_unsupported_ecc_is_absent():
    s = NvmlSource(fake_pynvml(ecc=False), node="n").collect()
    assert not [x for x in s if x.name == "infercast_gpu_ecc_errors_total"]
    assert one(s, "infercast_gpu_power_watts", gpu="0") == 412.5


def test_no_driver_is_a_scrape_error_not_a_crash():
    nv = fake_pynvml(available=False)
    src = NvmlSource(nv, node="n")
    for _ in range(2):
        with pytest.raises(ScrapeError, match="NVML unavailable: NVML Shared Library Not Found"):
            src.collect()
    assert nv.init_calls == 2  # retried each scrape: a driver loaded later is picked up


def test_real_pynvml_on_this_machine_reports_unavailable_or_reads():
    # whatever this machine has: no GPU -> a ScrapeError naming NVML; a GPU -> real samples
    try:
        s = NvmlSource(node="here").collect()
    except ScrapeError as e:
        assert "NVML unavailable" in str(e)
    else:
        assert any(x.name == "infercast_gpu_memory_total_bytes" and x.value > 0 for x in s)
