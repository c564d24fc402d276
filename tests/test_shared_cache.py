"""The suite's shared results (tests/shared_cache.py): a heavy fixture is computed once per run, whichever file or
xdist worker asks first, and a result is never handed to an asker whose inputs or code differ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import shared_cache
from tests.conftest import REPO
from tests.shared_cache import SharedCache, cache_root, digest


class Counted:
    """A compute that records each call and returns a fresh mutable result."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, folder: Path) -> dict:
        self.calls += 1
        (folder / "report.txt").write_text("made once")
        return {"served": [1, 2, 3], "report": folder / "report.txt"}


def test_a_second_request_for_the_same_key_gets_the_stored_result_without_computing(tmp_path):
    cache, compute = SharedCache(tmp_path), Counted()
    a = cache.get("run", ("flash-sale", "reactive", 0), compute)
    a["served"].append(99)  # a test that mutates its copy changes nobody else's
    b = SharedCache(tmp_path).get("run", ("flash-sale", "reactive", 0), compute)  # as another worker asks
    assert compute.calls == 1
    assert b["served"] == [1, 2, 3]
    assert b["report"].read_text() == "made once"  # the files a result names stay with it


def test_a_changed_key_part_computes_again(tmp_path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("scenario: {duration_seconds: 900}\n")
    cache, compute = SharedCache(tmp_path / "cache"), Counted()
    base = (fleet, "reactive", 0, np.arange(3.0))
    cache.get("run", base, compute)
    for key in [
        (fleet, "none", 0, np.arange(3.0)),  # another arm
        (fleet, "reactive", 1, np.arange(3.0)),  # another seed
        (fleet, "reactive", 0, np.arange(4.0)),  # other data
        (fleet, "reactive", "0", np.arange(3.0)),  # the string "0" is not the seed 0
    ]:
        cache.get("run", key, compute)
    assert compute.calls == 5
    fleet.write_text("scenario: {duration_seconds: 1200}\n")  # same path, other bytes
    cache.get("run", base, compute)
    assert compute.calls == 6
    cache.get("other-run", base, compute)  # another result's name
    assert compute.calls == 7


def test_other_product_sources_compute_again(tmp_path, monkeypatch):
    """The product's sources are always in the key: a result of other code is never reused."""
    cache, compute = SharedCache(tmp_path), Counted()
    cache.get("run", ("reactive",), compute)
    monkeypatch.setattr(shared_cache, "sources_digest", lambda: "0" * 64)
    cache.get("run", ("reactive",), compute)
    assert compute.calls == 2


def test_the_sources_digest_covers_the_twin_and_the_shipped_model():
    assert {"infercast", "actuators", "predictors", "examples"} <= set(shared_cache.PRODUCT_DIRS)
    assert all((REPO / d).is_dir() for d in shared_cache.PRODUCT_DIRS)
    assert (REPO / "infercast" / "simulator" / "twin").is_dir() and (REPO / "predictors" / "models").is_dir()
    assert len(shared_cache.sources_digest()) == 64


def test_a_failed_compute_stores_nothing_and_the_next_asker_computes(tmp_path):
    cache = SharedCache(tmp_path)

    def broken(folder: Path) -> int:
        (folder / "half-written").write_text("x")
        raise RuntimeError("the twin crashed")

    with pytest.raises(RuntimeError, match="the twin crashed"):
        cache.get("run", ("reactive",), broken)
    compute = Counted()
    assert cache.get("run", ("reactive",), compute)["served"] == [1, 2, 3]
    assert compute.calls == 1
    assert not (cache.entry("run", ("reactive",)) / "files" / "half-written").exists()


def test_a_key_part_without_a_content_is_refused_with_what_to_do():
    with pytest.raises(TypeError, match="cannot key a shared result on a object: name its content instead"):
        digest(object())
    assert digest("a", 1, 1.0, None, b"a") == digest("a", 1, 1.0, None, b"a")
    assert digest(1) != digest(1.0) != digest("1")


# Each process marks that it is asking, then asks; the compute (whoever runs it) waits until both have marked, so
# the second asks while the first computes.  Without the lock both would compute.
ASKER = """
import json, sys, time
from pathlib import Path
from tests.shared_cache import SharedCache

root, me = Path(sys.argv[1]), sys.argv[2]
(root / f"asking-{me}").write_text("")

def compute(folder):
    for _ in range(6000):
        if len(list(root.glob("asking-*"))) == 2:
            break
        time.sleep(0.01)
    else:
        raise SystemExit("the other process never asked")
    with open(root / "computed", "a") as f:
        f.write(me + "\\n")
    return {"computed_by": me}

print(json.dumps(SharedCache(root / "cache").get("run", ("flash-sale", "reactive", 0), compute)))
"""


def test_two_processes_asking_at_once_compute_once(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    procs = [
        subprocess.Popen([sys.executable, "-c", ASKER, str(tmp_path), me], cwd=REPO, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for me in ("gw0", "gw1")
    ]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    computed = (tmp_path / "computed").read_text().split()
    assert len(computed) == 1, computed
    assert [json.loads(out) for out, _ in outs] == [{"computed_by": computed[0]}] * 2


def test_the_root_is_the_runs_own_shared_by_its_workers(tmp_path, monkeypatch):
    class Factory:  # as pytest-xdist sets a worker's basetemp: <run's basetemp>/popen-gw0
        def getbasetemp(self) -> Path:
            return tmp_path / "pytest-7" / "popen-gw0"

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert cache_root(Factory()) == tmp_path / "pytest-7" / "shared-results"
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert cache_root(Factory()) == tmp_path / "pytest-7" / "popen-gw0" / "shared-results"
