"""The HTTP backend (`HttpAdmin`) against the real twin serving the router admin API on loopback, and against a
scripted faulty server: what the actuator sees for each answer, and that a retried action is applied once."""

from __future__ import annotations

import json

import pytest
import requests

from infercast.actuators.actions import PrewarmPool, SetAdmission, SetBreakerThreshold, SetPoolWeight
from infercast.actuators.admin import ActionRefused, BackendError, Result, apply_with_retries
from infercast.actuators.backends.router_http import HttpAdmin
from infercast.actuators.stamp import Stamp, stamped
from tests.actuators.faulty import FaultyServer, Step


def admin_for(twin, token: str | None = "s3cret", **kw) -> HttpAdmin:
    return HttpAdmin(twin.url, token, **kw)


def test_observe_reads_the_twin_as_the_in_process_backend_does(twin):
    from infercast.simulator.twin.admin import TwinAdmin

    obs = admin_for(twin).observe()
    assert obs == TwinAdmin(twin.fleet).observe()
    assert obs.pool("v4-main").replicas == 12 and obs.pool("v4-standby").standby is True
    assert obs.rate_limits == {"shared": 220.0}


def test_apply_changes_the_twin_and_answers_how_to_undo_it(twin):
    admin = admin_for(twin)
    res = admin.apply(SetPoolWeight("v4-main", 0.5))
    assert res == Result("applied", previous=SetPoolWeight("v4-main", 1.0))
    assert twin.fleet.router.weights["v4-main"] == 0.5
    res = admin.apply(SetBreakerThreshold("v4-main", 0.6))
    assert res.previous == SetBreakerThreshold("v4-main", 0.2)
    res = admin.apply(SetAdmission(memory_limit=0.8))
    assert res.status == "applied" and twin.fleet.router.admission()["memory_limit"] == 0.8
    assert admin.apply(PrewarmPool("v4-standby")).status == "applied"
    # the twin's own endpoints keep working beside the generic API
    pools = requests.get(f"{twin.url}/pools", timeout=5).json()
    assert pools["v4-main"]["weight"] == 0.5 and pools["v4-main"]["breaker_threshold_seconds"] == 0.6


def test_what_the_fleet_refuses_is_refused_not_retried(twin):
    admin = admin_for(twin)
    with pytest.raises(ActionRefused, match=r"HTTP 422: .*no-such-pool"):
        admin.apply(SetPoolWeight("no-such-pool", 1.0))
    res = apply_with_retries(admin, SetPoolWeight("no-such-pool", 1.0), sleep=lambda s: None)
    assert res.status == "refused" and res.attempts == 1
    with pytest.raises(ActionRefused, match="HTTP 401: missing or wrong bearer token"):
        admin_for(twin, token="wrong").apply(SetPoolWeight("v4-main", 0.5))
    assert twin.fleet.router.weights["v4-main"] == 1.0  # nothing changed


def test_a_body_the_api_does_not_know_is_a_400_naming_the_field(twin):
    r = requests.post(
        f"{twin.url}/v1/actions",
        json={"kind": "set_pool_weight", "pool": "v4-main", "wieght": 2},
        headers={"Authorization": "Bearer s3cret"},
        timeout=5,
    )
    assert r.status_code == 400 and "unknown field(s) ['wieght']" in r.json()["error"]
    r = requests.post(
        f"{twin.url}/v1/actions",
        json={"kind": "set_pool_weight", "pool": "v4-main", "weight": 2},
        headers={"Authorization": "Bearer s3cret", "X-Fencing-Token": "-1"},
        timeout=5,
    )
    assert r.status_code == 400 and "X-Fencing-Token" in r.json()["error"]
    assert twin.fleet.router.weights["v4-main"] == 1.0


def test_an_idempotency_key_applies_a_retried_post_once(twin):
    admin = admin_for(twin)
    stamp = Stamp(key="decision-1")
    first = admin.apply(SetPoolWeight("v4-main", 0.5), stamp=stamp)
    twin.fleet.router.set_pool_weight("v4-main", 0.7)  # someone else changes it meanwhile
    again = admin.apply(SetPoolWeight("v4-main", 0.5), stamp=stamp)
    assert again.status == "applied" and again.previous == first.previous == SetPoolWeight("v4-main", 1.0)
    assert "replayed" in again.detail
    assert twin.fleet.router.weights["v4-main"] == 0.7  # the replay changed nothing
    assert [a for _, a in twin.fleet.actions] == [SetPoolWeight("v4-main", 0.5)]
    # the same key for another action is a client bug: refused, nothing applied
    with pytest.raises(ActionRefused, match="HTTP 422: Idempotency-Key 'decision-1' was used for another action"):
        admin.apply(SetPoolWeight("v4-main", 0.1), stamp=stamp)
    # after a restart the loop asks what became of a key
    found = admin.lookup("decision-1")
    assert found is not None and found.status == "applied" and found.previous == SetPoolWeight("v4-main", 1.0)
    assert admin.lookup("never-sent") is None


def test_a_stale_fencing_token_is_refused(twin):
    admin = admin_for(twin)
    assert admin.apply(SetPoolWeight("v4-main", 0.5), stamp=Stamp(fencing_token=7)).status == "applied"
    with pytest.raises(ActionRefused, match=r"HTTP 409: stale fencing token 6 \(a newer leader holds 7\)"):
        admin.apply(SetPoolWeight("v4-main", 0.1), stamp=Stamp(fencing_token=6))
    assert twin.fleet.router.weights["v4-main"] == 0.5
    assert admin.apply(SetPoolWeight("v4-main", 0.2), stamp=Stamp(fencing_token=8)).status == "applied"


def test_a_lost_answer_is_retried_with_the_same_key_and_applied_once(twin):
    """The first POST reaches the twin and is applied, but its answer is lost (the connection is reset after the
    client's timeout); apply_with_retries sends it again with the same Idempotency-Key and gets the first answer."""

    def forward(method, path, headers, body):
        h = {k: v for k, v in headers.items() if k in ("authorization", "idempotency-key", "content-type")}
        r = requests.request(method, twin.url + path, headers=h, data=body, timeout=5)
        return r.status_code, r.content

    srv = FaultyServer([Step(forward=True, lose_answer=True, delay=0.6), Step(forward=True)], handler=forward)
    try:
        admin = HttpAdmin(srv.url, "s3cret", timeout_seconds=0.3)
        res = apply_with_retries(
            stamped(admin, Stamp(key="k-lost")), SetPoolWeight("v4-main", 0.25), sleep=lambda s: None
        )
        assert res.status == "applied" and res.attempts == 2
        assert res.previous == SetPoolWeight("v4-main", 1.0)  # the first answer, not the state after it
        assert [a for _, a in twin.fleet.actions] == [SetPoolWeight("v4-main", 0.25)]  # applied once
        assert [s.headers["idempotency-key"] for s in srv.seen] == ["k-lost", "k-lost"]
    finally:
        srv.close()


ANSWER = json.dumps({"status": "applied", "detail": "", "previous": None}).encode()


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (Step(500, b'{"error": "database locked"}'), "HTTP 500: database locked"),
        (Step(502, b"<html>Bad Gateway</html>", "text/html"), "HTTP 502: <html>Bad Gateway</html>"),
        (Step(200, b"<html>login</html>", "text/html"), "HTTP 200 with a body that is not JSON"),
        (Step(200, b'{"status": "applied", "previous": {"kind": "nope"}}'), "unknown action kind 'nope'"),
        (Step(200, b'{"status": "maybe"}'), "answer.status: expected applied, failed or refused"),
        (Step(200, ANSWER, delay=1.0), "Read timed out"),
        (Step(200, ANSWER, dribble=0.05), "answer not complete within the timeout"),
        (Step(reset=True), "Connection"),
        (Step(200, b'{"status": "applied"' + b" " * (1024 * 1024 + 10) + b"}"), "answer over 1048576 bytes"),
    ],
    ids=["500", "502-html", "200-html", "unknown-undo", "bad-status", "timeout", "dribble", "reset", "huge"],
)
def test_every_transport_fault_is_a_backend_error_and_retried_then_failed(step, message):
    srv = FaultyServer([step])
    try:
        admin = HttpAdmin(srv.url, "tok", timeout_seconds=0.5)
        with pytest.raises(BackendError, match=message):
            admin.apply(SetPoolWeight("v4-main", 0.5))
        sleeps: list[float] = []
        res = apply_with_retries(admin, SetPoolWeight("v4-main", 0.5), attempts=3, sleep=sleeps.append)
        assert res.status == "failed" and res.attempts == 3 and "gave up after 3 attempts" in res.detail
        assert sleeps == [0.2, 0.4]  # exponential backoff between the attempts
        assert "tok" not in res.detail
    finally:
        srv.close()


def test_a_500_then_success_is_applied_on_the_second_attempt():
    srv = FaultyServer([Step(503, b'{"error": "busy"}'), Step(200, ANSWER)])
    try:
        res = apply_with_retries(HttpAdmin(srv.url), SetPoolWeight("v4-main", 0.5), sleep=lambda s: None)
        assert res.status == "applied" and res.attempts == 2
        assert [s.method for s in srv.seen] == ["POST", "POST"]
        assert json.loads(srv.seen[0].body) == {"kind": "set_pool_weight", "pool": "v4-main", "weight": 0.5}
    finally:
        srv.close()


def test_nothing_listening_is_a_backend_error_and_observe_says_so():
    from infercast.servers import free_port

    admin = HttpAdmin(f"http://user:pw@127.0.0.1:{free_port()}")  # credentials in the URL: no token too (item 3)
    with pytest.raises(BackendError, match="ConnectionError") as e:
        admin.observe()
    assert "pw" not in str(e.value) and "***@127.0.0.1" in str(e.value)
    res = apply_with_retries(admin, SetPoolWeight("v4-main", 0.5), sleep=lambda s: None)
    assert res.status == "failed" and "ConnectionError" in res.detail


def test_a_fleet_document_that_is_not_one_is_a_backend_error_naming_the_field():
    body = json.dumps({"at": 1.0, "pools": [{"name": "a", "version": "v", "replicas": -1, "ready": 0, "weight": 1}]})
    srv = FaultyServer([Step(200, body.encode())])
    try:
        with pytest.raises(BackendError, match=r"fleet.pools\[0\].replicas: expected a finite number >= 0"):
            HttpAdmin(srv.url).observe()
    finally:
        srv.close()


@pytest.mark.parametrize("token", ["²", "1²", "٣".encode(), "３".encode(), "+3", "-1", "3.0", "1" * 19])
def test_a_fencing_token_that_is_not_ascii_digits_is_a_400_naming_the_header_not_a_500(twin, token):
    """Issue 36 item 7.  Before, what the user saw: `X-Fencing-Token: ²` passed `str.isdigit` ("²".isdigit() is
    true), `int("²")` raised, and the router admin API answered 500 "internal error: ValueError".  Now any token that
    is not 1-18 ASCII digits is a 400 that names the header, and nothing is applied."""
    before = twin.fleet.router.weights["v4-main"]
    r = requests.post(
        f"{twin.url}/v1/actions",
        json={"kind": "set_pool_weight", "pool": "v4-main", "weight": 0.3},
        headers={"Authorization": "Bearer s3cret", "X-Fencing-Token": token},
        timeout=5,
    )
    assert r.status_code == 400, r.text
    assert "X-Fencing-Token must be a non-negative integer" in r.json()["error"]
    assert twin.fleet.router.weights["v4-main"] == before
