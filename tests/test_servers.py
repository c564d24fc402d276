"""`infercast.servers` keeps "not installed" apart from "it ran and failed" (issue 12): a Prometheus that exits on a
bad config is a test failure with Prometheus' own words, never a skip."""

from __future__ import annotations

import os
import socket
import sys
import time

import pytest

from infercast import servers
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


def test_a_port_claimed_by_another_infercast_process_is_not_handed_out_again(monkeypatch):
    """Two test runs (or two xdist workers) asking for a free port at the same moment: the kernel may offer both the
    same port (free now, since neither has bound it yet).  The claim file makes the second one move on."""
    first = servers.free_port()
    assert (servers._claims() / str(first)).exists()
    offered = iter([first, first, first + 1 if first < 65535 else first - 1])
    monkeypatch.setattr(servers, "_kernel_port", lambda: next(offered))
    second = servers.free_port()
    assert second != first, "a claimed port was handed out twice"


def test_a_stale_claim_is_taken_over(monkeypatch):
    port = servers.free_port()
    claim = servers._claims() / str(port)
    old = time.time() - servers.CLAIM_SECONDS - 60
    os.utime(claim, (old, old))
    monkeypatch.setattr(servers, "_kernel_port", lambda: port)
    assert servers.free_port() == port  # the claim of a run that ended long ago does not hold the port forever


@pytest.mark.servers
def test_a_server_whose_port_was_taken_meanwhile_starts_on_another(monkeypatch, tmp_path):
    """Between `free_port` and the server's bind, something else (not infercast: an outgoing connection, another
    program) took the port.  Redis exits with "Address already in use"; the helper starts it on a fresh port
    instead of failing the test or, worse, reporting the other program as our Redis."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        fresh = servers.free_port()
        ports = iter([taken, fresh])
        monkeypatch.setattr(servers, "free_port", lambda: next(ports))
        with servers.start_redis() as r:
            assert r.port == fresh
            with socket.create_connection(("127.0.0.1", r.port), timeout=5) as c:
                c.sendall(b"PING\r\n")
                assert c.recv(16).startswith(b"+PONG")
        # a port given explicitly is not silently replaced: the user asked for that one
        with pytest.raises(servers.PortInUse, match=r"(?i)address already in use"):
            servers.start_redis(port=taken, workdir=tmp_path)
