"""Provision the generated dashboards into a running Grafana with grafana-client.

The URL and token come from the environment (`GRAFANA_URL`, `GRAFANA_TOKEN`); the token is never printed, and a
URL is only ever shown without its user:password part.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from infercast.redact import redact, redact_url

FOLDER_UID = "infercast"
FOLDER_TITLE = "infercast"


class PushError(RuntimeError):
    """Grafana refused or could not be reached; the message is safe to print."""


@dataclass(frozen=True)
class Pushed:
    uid: str
    title: str
    url: str
    version: int | None


def load_dashboards(paths: Iterable[Path]) -> list[dict]:
    docs = []
    for p in paths:
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise PushError(f"{p}: cannot read a dashboard: {e}") from None
        if not isinstance(doc, dict) or not doc.get("uid") or not isinstance(doc.get("panels"), list):
            raise PushError(f"{p}: not a dashboard (needs a uid and a panels list)")
        docs.append(doc)
    return docs


def push(url: str, token: str | None, dashboards: list[dict], folder_uid: str = FOLDER_UID) -> list[Pushed]:
    """Create the folder if needed and upload every dashboard (overwriting the previous version)."""
    from grafana_client import GrafanaApi
    from grafana_client.client import GrafanaClientError, GrafanaException

    parts = urlsplit(url)
    secrets = [token or "", parts.password or ""]
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PushError(f"GRAFANA_URL must be an http(s) URL, got {redact_url(url)!r}")
    api = GrafanaApi.from_url(url, credential=token or None, timeout=10.0)
    try:
        try:
            api.folder.get_folder(folder_uid)
        except GrafanaClientError as e:
            if getattr(e, "status_code", None) != 404:
                raise
            api.folder.create_folder(FOLDER_TITLE, uid=folder_uid)
        done = []
        for doc in dashboards:
            body = {
                "dashboard": {**doc, "id": None},
                "folderUid": folder_uid,
                "overwrite": True,
                "message": "infercast dashboards push",
            }
            res = api.dashboard.update_dashboard(body) or {}
            done.append(Pushed(doc["uid"], doc.get("title", ""), str(res.get("url", "")), res.get("version")))
        return done
    except GrafanaException as e:
        detail = f"HTTP {e.status_code} {e.message}"
        body = getattr(e, "response", None)
        if isinstance(body, dict) and body.get("message"):
            detail += f" ({body['message']})"  # Grafana's own words; redacted below like everything else
        raise PushError(redact(f"Grafana at {redact_url(url)} refused: {detail}", secrets)) from None
    except Exception as e:  # connection errors come from niquests/urllib3 with varying types
        raise PushError(
            redact(f"cannot reach Grafana at {redact_url(url)}: {type(e).__name__}: {e}", secrets)
        ) from None
