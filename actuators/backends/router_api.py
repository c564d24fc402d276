"""The generic router admin API, served: any `FleetAdmin` behind `GET /v1/fleet` and `POST /v1/actions`.

docs/router-admin-api.md is the contract; this is its reference implementation, served through
`infercast.httpserve` (the twin's `TwinServer` mounts it over `infercast.simulator.twin.admin.TwinAdmin`).  A
router written in another language implements the same three routes;
`infercast.actuators.backends.router_http.HttpAdmin` is the client.

What the server keeps, and why:
- the answers of the last `remember` idempotency keys: a POST retried with the same `Idempotency-Key` (the client
  timed out but the first one was applied) gets the first answer again, `"replayed": true`, and changes nothing;
  the same key with another action is a 422 (a client bug, never silently applied);
- the highest fencing token seen (`X-Fencing-Token`): a lower one is a 409, so a deposed leader cannot act.
  Once fencing is on (a token has been seen, or `require_fencing`), a mutating request without the header is a
  428: it cannot skip the fence.  A token more than `max_fence_step` above the highest seen is a 409 "from the
  future" (a forged 999... would otherwise lock the rightful leader out); the first token a fresh router sees is
  trusted.  `GET /v1/fence` answers the highest seen, so a leader can find it is behind (actuators/daemon.py).
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from infercast.actuators.actions import ActionError, parse_action
from infercast.actuators.admin import ActionRefused, BackendError, FleetAdmin
from infercast.actuators.stamp import KEY_PATTERN, fence_refusal
from infercast.actuators.wire import observation_to_dict, result_to_dict
from infercast.httpserve import HttpError, Request, Response, Route

PREFIX = "/v1"
KEY_HEADER = "idempotency-key"
FENCING_HEADER = "x-fencing-token"
REMEMBER = 10_000
#: the most a fencing token may exceed the highest seen: each new leader adds one, a recovering leader one more
MAX_FENCE_STEP = 1000


@dataclass(frozen=True)
class _Answer:
    body: str  # the action as sent (canonical JSON): a replay must carry the same action
    status: int
    payload: dict


class RouterAdminApi:
    """Routes serving `admin` as the router admin API; `lock` serialises every call into it (the twin's lock)."""

    def __init__(
        self,
        admin: FleetAdmin,
        lock: threading.Lock | None = None,
        *,
        remember: int = REMEMBER,
        require_fencing: bool = False,
        max_fence_step: int = MAX_FENCE_STEP,
    ) -> None:
        self.admin = admin
        self.lock = lock or threading.Lock()
        self.remember = remember
        self.fence = 0  # the highest fencing token seen
        self.fencing = require_fencing  # on: every mutating request must carry a valid token
        self.max_fence_step = max_fence_step
        self._seen_fence = False
        self._answers: OrderedDict[str, _Answer] = OrderedDict()

    def routes(self) -> list[Route]:
        return [
            Route("GET", f"{PREFIX}/fleet", self._fleet),
            Route("POST", f"{PREFIX}/actions", self._apply, mutates=True, json_body=True),
            Route("GET", f"{PREFIX}/actions/{{key}}", self._lookup),
            Route("GET", f"{PREFIX}/fence", self._fence),
        ]

    def _fence(self, _: Request) -> Response:
        with self.lock:
            return Response.json({"fencing_token": self.fence if self._seen_fence else None, "required": self.fencing})

    def _fleet(self, _: Request) -> Response:
        with self.lock:
            try:
                obs = self.admin.observe()
            except BackendError as e:
                raise HttpError(503, f"fleet unavailable: {e}") from None
        return Response.json(observation_to_dict(obs))

    def _lookup(self, req: Request) -> Response:
        key = req.params["key"]
        with self.lock:
            answer = self._answers.get(key)
        if answer is None:
            raise HttpError(404, f"no action applied with idempotency key {key[:100]!r}")
        return Response.json({**answer.payload, "replayed": True}, answer.status)

    def _apply(self, req: Request) -> Response:
        body = req.json()
        try:
            action = parse_action(body)
        except ActionError as e:
            raise HttpError(400, str(e)) from None
        key = req.headers.get(KEY_HEADER)
        if key is not None and not KEY_PATTERN.fullmatch(key):
            raise HttpError(400, "Idempotency-Key must be 1-200 characters of [A-Za-z0-9._:~+/=-]")
        token = _fencing_token(req.headers.get(FENCING_HEADER))
        canonical = json.dumps(action.to_dict(), sort_keys=True)
        with self.lock:
            if key is not None and key in self._answers:
                answer = self._answers[key]
                if answer.body != canonical:
                    raise HttpError(422, f"Idempotency-Key {key!r} was used for another action")
                return Response.json({**answer.payload, "replayed": True}, answer.status)
            if token is None and self.fencing:
                raise HttpError(428, f"X-Fencing-Token required: fencing is on (highest token seen {self.fence})")
            if token is not None:
                refused = fence_refusal(token, self.fence if self._seen_fence else None, self.max_fence_step)
                if refused:
                    raise HttpError(409, refused)
                self.fence = token
                self._seen_fence = self.fencing = True
            try:
                result = self.admin.apply(action)
            except ActionRefused as e:
                status, payload = 422, {"status": "refused", "error": str(e), "detail": str(e), "previous": None}
            except BackendError as e:  # transient: not remembered, the client retries with the same key
                raise HttpError(503, f"fleet unavailable: {e}") from None
            else:
                status, payload = 200, {**result_to_dict(result), "attempts": 1}
            payload = {**payload, "idempotency_key": key}
            if key is not None:
                self._answers[key] = _Answer(canonical, status, payload)
                while len(self._answers) > self.remember:
                    self._answers.popitem(last=False)
        return Response.json({**payload, "replayed": False}, status)


#: a fencing token on the wire: ASCII digits only (`str.isdigit` is true of "²" and "٣", which `int` refuses or
#: reads as another number: a 500 "internal error: ValueError" before, issue 36 item 7)
_TOKEN = re.compile(r"[0-9]{1,18}")


def _fencing_token(raw: str | None) -> int | None:
    if raw is None:
        return None
    raw = raw.strip()
    if not _TOKEN.fullmatch(raw):
        raise HttpError(400, f"X-Fencing-Token must be a non-negative integer, got {raw[:20]!r}")
    return int(raw)
