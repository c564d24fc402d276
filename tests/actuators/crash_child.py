"""Test-only: one decision of the actuator, carried out in its own process so a test can `kill -9` it mid-action.

    python -m tests.actuators.crash_child DB URL KEY STOP

It records a decision (`set_pool_weight v4-main 0.25`) with idempotency key KEY in the audit trail DB, prints
DECIDED, then (unless STOP is `decided`) applies it through the HTTP backend at URL with the key, prints APPLIED,
and -- the moment the test kills it -- waits before recording the answer, as a daemon would be caught between the
backend's answer and the audit trail's write.
"""

from __future__ import annotations

import sys
import time

from infercast.actuators.actions import SetPoolWeight
from infercast.actuators.admin import apply_with_retries
from infercast.actuators.audit import Audit
from infercast.actuators.backends.router_http import HttpAdmin
from infercast.actuators.stamp import Stamp, stamped


def main(db: str, url: str, key: str, stop: str) -> None:
    audit = Audit(db)
    action = SetPoolWeight("v4-main", 0.25)
    decision = audit.record_decision(time.time(), key, action, {"reason": "forecast 0.91 > 0.75"})
    print("DECIDED", decision, flush=True)
    if stop == "decided":
        time.sleep(60)
    result = apply_with_retries(stamped(HttpAdmin(url, "s3cret"), Stamp(key=key)), action)
    print("APPLIED", result.status, flush=True)
    time.sleep(60)  # killed here, before mark_applied
    audit.mark_applied(decision, result, time.time())


if __name__ == "__main__":
    main(*sys.argv[1:5])
