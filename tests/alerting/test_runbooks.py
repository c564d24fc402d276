"""Runbooks a pager can open: the base URL comes from the fleet file (`alerting.runbook_base_url`), and
`infercast check` says whether each of infercast's alerts links to a page the person paged can open."""

from __future__ import annotations

import pytest
import yaml

from infercast.alertrules.rules import alert_names
from infercast.config import ConfigError, parse_config
from infercast.tools.check import check_runbooks

from .conftest import ALERTRULES, REPO

BASE = "https://runbooks.example.org/infercast"


def _fleet(tmp_path, **alerting):
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    doc["alerting"] = alerting
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_the_fleet_files_runbook_base_url_reaches_every_alert_and_check_accepts_it(tmp_path, monkeypatch):
    """A user who sets `alerting.runbook_base_url` gets rules whose every `runbook_url` is `<base>/<Alert>.md` (an
    https link the pager opens), and `infercast check` says ok."""
    from infercast.alertrules.generate import main

    monkeypatch.delenv("INFERCAST_RUNBOOK_BASE_URL", raising=False)
    fleet = _fleet(tmp_path, runbook_base_url=BASE + "/")
    out = tmp_path / "rules"
    assert main(["--fleet", str(fleet), "--out", str(out)]) == 0
    rules = [r for g in yaml.safe_load((out / "alerts.yml").read_text())["groups"] for r in g["rules"]]
    assert rules and all(r["annotations"]["runbook_url"] == f"{BASE}/{r['alert']}.md" for r in rules)
    res = check_runbooks(out, [fleet])
    assert res is not None and res.status == "ok", res
    assert res.detail == f"{len(rules)} alerts link to an http(s) runbook"


def test_check_says_the_shipped_paths_are_not_links_a_pager_opens():
    res = check_runbooks(ALERTRULES / "rules")
    assert res is not None and res.status == "skipped"  # a failure with --strict
    assert "not a page a pager can open" in res.detail and "alerting.runbook_base_url" in res.detail


def test_check_fails_rules_not_linking_where_the_fleet_file_publishes(tmp_path):
    """The fleet file says the runbooks are published at BASE but the rules were built without it: the pager
    would get a path.  FAILED, with the command that rebuilds them."""
    fleet = _fleet(tmp_path, runbook_base_url=BASE)
    res = check_runbooks(ALERTRULES / "rules", [fleet])
    assert res is not None and res.status == "FAILED"
    n = len(alert_names())
    assert f"{n} of {n} alerts do not link under {fleet}'s alerting.runbook_base_url {BASE}" in res.detail
    assert "python -m infercast.alertrules.generate --fleet" in res.detail


def test_check_fails_a_runbook_page_that_does_not_exist_and_an_alert_without_one(tmp_path):
    doc = yaml.safe_load((ALERTRULES / "rules" / "alerts.yml").read_text())
    rule = doc["groups"][0]["rules"][0]
    rule["annotations"]["runbook_url"] = "alertrules/runbooks/NoSuchPage.md"
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(doc))
    res = check_runbooks(tmp_path)
    assert res is not None and res.status == "FAILED" and "NoSuchPage.md" in res.detail
    del rule["annotations"]["runbook_url"]
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(doc))
    res = check_runbooks(tmp_path)
    assert res is not None and res.status == "FAILED" and f"no runbook_url on {rule['alert']}" in res.detail


def test_your_own_alerts_are_not_looked_at(tmp_path):
    (tmp_path / "mine.yml").write_text("groups: [{name: x, rules: [{alert: Mine, expr: vector(1)}]}]\n")
    assert check_runbooks(tmp_path) is None


@pytest.mark.parametrize("bad", ["alertrules/runbooks", "wiki.example.com/runbooks", "ftp://x/y"])
def test_a_runbook_base_that_is_not_an_http_link_is_refused(bad):
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    doc["alerting"] = {"runbook_base_url": bad}
    with pytest.raises(ConfigError, match=r"alerting.runbook_base_url: .*http\(s\) URL a pager can open"):
        parse_config(doc)
