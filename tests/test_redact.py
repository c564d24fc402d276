"""Secrets never reach a log line or an error message: one helper (`infercast.redact`) wherever URLs are shown."""

from __future__ import annotations

import logging

import pytest

from infercast.exporters.forecasts import PrometheusForecasts
from infercast.redact import redact, redact_url
from infercast.servers import free_port
from infercast.store import StoreError
from infercast.store.prometheus import PrometheusStore
from infercast.tools.cli import main
from tests.exporters.fakes import FixtureServer, Route


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://admin:hunter2@grafana:3000/api?x=1", "http://***@grafana:3000/api"),
        ("https://token@prom.example/", "https://***@prom.example/"),
        ("http://127.0.0.1:9090", "http://127.0.0.1:9090"),
        ("http://[::1]:9090/p?token=abc", "http://[::1]:9090/p"),
    ],
)
def test_a_url_is_shown_without_user_info_or_query(url, shown):
    assert redact_url(url) == shown


def test_short_secrets_do_not_mangle_the_message():
    # the old helper replaced every substring: password "x" gave "Ma*** retries e***ceeded"
    text = "cannot reach http://admin:x@127.0.0.1:1: Max retries exceeded with url: /api (x)"
    out = redact(text, ["x", "e"])
    assert "Max retries exceeded with url: /api" in out
    assert "admin" not in out and "http://***@127.0.0.1:1" in out
    assert out.endswith("(***)")  # the secret standing alone is still masked


def test_tokens_in_headers_and_bearer_values_are_masked():
    out = redact("invalid API key Bearer glsa_abc.DEF-123 (Authorization: Basic dXNlcjpwdw==)", ["glsa_abc.DEF-123"])
    assert "glsa_abc" not in out and "dXNlcjpwdw" not in out
    assert "token=***" in redact("GET /x?token=s3cr3t failed")


def test_forecast_source_logs_no_password(caplog):
    # the exporter's forecast headroom source used to log its URL as given, password included
    caplog.set_level(logging.INFO, logger="infercast.exporters.forecasts")
    srv = FixtureServer({"/api/v1/query": Route("{}", status=500)})
    try:
        url = srv.url("").replace("http://", "http://infercast:s3cr3tpw@")
        assert PrometheusForecasts(url, refresh_seconds=0)() is None
        assert PrometheusForecasts(f"http://u:s3cr3tpw@127.0.0.1:{free_port()}", refresh_seconds=0)() is None
    finally:
        srv.close()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "unavailable" in text and "***@127.0.0.1" in text
    assert "s3cr3tpw" not in text


def test_store_errors_carry_no_password():
    srv = FixtureServer({"/api/v1/query_range": Route('{"status": "error", "error": "bad query"}', status=400)})
    messages = []
    try:
        for url in (srv.url("").replace("http://", "http://u:s3cr3tpw@"), f"http://u:s3cr3tpw@127.0.0.1:{free_port()}"):
            with pytest.raises(StoreError) as e:
                PrometheusStore(url, timeout_seconds=2).query_range("up", None, 0.0, 10.0, 1.0)
            messages.append(str(e.value))
    finally:
        srv.close()
    assert "bad query" in messages[0] and "cannot connect" in messages[1]
    assert all("s3cr3tpw" not in m and "***@127.0.0.1" in m for m in messages), messages


def test_dashboards_push_error_is_readable_and_has_no_password(monkeypatch, capsys):
    monkeypatch.setenv("GRAFANA_URL", "http://admin:x@127.0.0.1:1")  # nothing listens on port 1
    monkeypatch.delenv("GRAFANA_TOKEN", raising=False)
    assert main(["dashboards", "push"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach Grafana at http://***@127.0.0.1:1" in err
    assert "Ma***" not in err and "e***ceeded" not in err and "admin" not in err
