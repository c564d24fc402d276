"""`infercast.servers` keeps "not installed" apart from "it ran and failed" (issue 12): a Prometheus that exits on a
bad config is a test failure with Prometheus' own words, never a skip."""

from __future__ import annotations

import sys

import pytest

from infercast.servers import ServerFailed, ServerUnavailable, start_prometheus, which
from tests.alerting import stack


def test_a_missing_binary_is_unavailable():
    with pytest.raises(ServerUnavailable, match=r"none of .*infercast-no-such-server.* is installed"):
        which("infercast-no-such-server")


@pytest.mark.servers
def test_a_server_exiting_on_a_bad_config_is_a_failure_not_unavailable(tmp_path):
    # before: ServerUnavailable for both, so every test catching it to skip turned our broken config into a skip
    with pytest.raises(ServerFailed) as e:
        start_prometheus(
            "scrape_configs: [{job_name: x, static_configs: [{targets: 'not-a-list'}]}]\n", workdir=tmp_path
        )
    assert not isinstance(e.value, ServerUnavailable)
    assert "prometheus exited with" in str(e.value) and "not-a-list" in str(e.value)  # its log, for the reader


def test_a_broken_exporter_fails_the_service_tests_instead_of_skipping_them(monkeypatch):
    # before: services_ready() turned "the twin emits nothing" into a skip of the end-to-end and panel tests
    monkeypatch.setattr(stack, "CLI", [sys.executable, "-c", "print('# nothing here')"])
    assert "serves no infercast_kv_cache_usage_ratio" in (stack.services_problem() or "")
    with pytest.raises(pytest.fail.Exception, match="do not work: infercast exporter serves no"):
        stack.require_services()
    monkeypatch.setattr(stack, "CLI", [sys.executable, "-c", "import sys; sys.exit('twin crashed')"])
    with pytest.raises(pytest.fail.Exception, match="twin crashed"):
        stack.require_services()
