"""`infercast dashboards push` against a tiny loopback Grafana stand-in that records the calls it gets."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from infercast.dashboards.build import DASHBOARDS
from infercast.tools.cli import main

TOKEN = "glsa_s3cr3t-T0KEN-never-printed"


class FakeGrafana:
    """Answers the few Grafana HTTP API calls push makes; `echo_token` makes it leak the token in an error."""

    def __init__(self, *, status: int = 200, echo_token: bool = False) -> None:
        self.calls: list[tuple[str, str, str | None, dict | None]] = []
        self.folders: set[str] = set()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self) -> dict | None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                fake.calls.append((self.command, self.path, self.headers.get("Authorization"), body))
                return body

            def do_GET(self) -> None:
                self._record()
                if status != 200:
                    msg = f"invalid API key {self.headers.get('Authorization')}" if echo_token else "invalid API key"
                    return self._reply(status, {"message": msg})
                uid = self.path.rsplit("/", 1)[-1]
                if uid in fake.folders:
                    return self._reply(200, {"uid": uid, "title": uid})
                return self._reply(404, {"message": "folder not found"})

            def do_POST(self) -> None:
                body = self._record() or {}
                if self.path == "/api/folders":
                    fake.folders.add(body["uid"])
                    return self._reply(200, {"uid": body["uid"], "title": body["title"]})
                if self.path == "/api/dashboards/db":
                    uid = body["dashboard"]["uid"]
                    return self._reply(200, {"status": "success", "uid": uid, "url": f"/d/{uid}", "version": 1})
                return self._reply(404, {"message": "not found"})

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def grafana():
    g = FakeGrafana()
    yield g
    g.close()


def test_push_creates_the_folder_and_uploads_every_dashboard(grafana, monkeypatch, capsys):
    monkeypatch.setenv("GRAFANA_URL", grafana.url)
    monkeypatch.setenv("GRAFANA_TOKEN", TOKEN)
    assert main(["dashboards", "push"]) == 0
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err
    assert f"{len(DASHBOARDS)} dashboards pushed" in out.err
    methods = [(m, p) for m, p, _, _ in grafana.calls]
    assert methods[:2] == [("GET", "/api/folders/infercast"), ("POST", "/api/folders")]
    uploads = [body for m, p, _, body in grafana.calls if p == "/api/dashboards/db"]
    assert sorted(b["dashboard"]["uid"] for b in uploads) == sorted(
        [
            "infercast-fleet",
            "infercast-kv-cache",
            "infercast-forecasts",
            "infercast-latency",
            "infercast-gpu",
            "infercast-actuator",
        ]
    )
    assert all(b["overwrite"] is True and b["folderUid"] == "infercast" for b in uploads)
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth, _ in grafana.calls)
    # a second push finds the folder and does not create it again
    assert main(["dashboards", "push"]) == 0
    assert [p for m, p, _, _ in grafana.calls].count("/api/folders") == 1


def test_a_refusing_grafana_is_reported_without_the_token(monkeypatch, capsys):
    g = FakeGrafana(status=401, echo_token=True)
    try:
        monkeypatch.setenv("GRAFANA_URL", g.url)
        monkeypatch.setenv("GRAFANA_TOKEN", TOKEN)
        assert main(["dashboards", "push"]) == 1
    finally:
        g.close()
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err
    assert "refused" in out.err and "***" in out.err


def test_password_in_the_url_is_never_printed(monkeypatch, capsys):
    monkeypatch.setenv("GRAFANA_URL", "http://admin:hunter2@127.0.0.1:1")  # nothing listens on port 1
    monkeypatch.delenv("GRAFANA_TOKEN", raising=False)
    assert main(["dashboards", "push"]) == 1
    out = capsys.readouterr()
    assert "hunter2" not in out.out + out.err
    assert "cannot reach Grafana at http://***@127.0.0.1:1" in out.err


def test_missing_url_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.delenv("GRAFANA_URL", raising=False)
    assert main(["dashboards", "push"]) == 2
    assert "set GRAFANA_URL" in capsys.readouterr().err
