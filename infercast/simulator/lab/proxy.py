"""HAProxy in front of the lab's engines: its configuration and how the lab starts it; the runtime API client is
the actuator's backend's (actuators/backends/haproxy.py).

HAProxy (Debian's package) is the lab's proxy because it is what many users already run in front of HTTP services,
it installs here in seconds, and its runtime API changes a running proxy without a reload: a server's weight
(`set weight`), its concurrency limit (`set maxconn server`: requests beyond it wait in HAProxy's queue instead of
in the engine's KV cache) and its state (`set server ... state drain`).  Every value is read back from `show stat`,
which is what lets the actuator's backend (actuators/backends/haproxy.py) check each write.  The runtime API
listens on a UNIX socket (mode 600) in the lab's directory, never on a TCP port.

Two stick tables hold what the actuator's backend must remember in the proxy itself (so that it survives the
actuator, as Redis' and the file backend's state does): `ic_action_keys` (idempotency key -> a 31-bit digest of
the action applied under it) and `ic_fence` (the highest fencing token seen).
"""

from __future__ import annotations

import re
from pathlib import Path

from infercast.actuators.backends.haproxy import BACKEND, FENCE_TABLE, KEYS_TABLE

_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def haproxy_config(port: int, servers: dict[str, int], socket_path: Path, weight: int = 100) -> str:
    """A configuration with one HTTP frontend on 127.0.0.1:`port` balancing over `servers` (name -> port).

    `leastconn`, because a request to an LLM engine lasts seconds and its cost is its length: round-robin piles
    long generations on one engine.  No concurrency limit at first (`maxconn 0`, until the actuator sets one); the
    queue timeout is long, so that a limit queues requests instead of failing them.  No health checks: the lab
    starts the engines and waits for them before it starts the proxy."""
    for name in servers:
        if not _NAME.fullmatch(name):
            raise ValueError(f"server name {name!r}: 1-64 characters of [A-Za-z0-9_.:-]")
    lines = [
        "global",
        f"    stats socket {socket_path} mode 600 level admin",
        "    maxconn 4096",
        "defaults",
        "    mode http",
        "    timeout connect 5s",
        "    timeout client 600s",
        "    timeout server 600s",
        "    timeout queue 600s",
        "frontend lab",
        f"    bind 127.0.0.1:{port}",
        f"    default_backend {BACKEND}",
        f"backend {BACKEND}",
        "    balance leastconn",
        *(f"    server {name} 127.0.0.1:{p} weight {weight} maxconn 0" for name, p in servers.items()),
        f"backend {KEYS_TABLE}",
        "    stick-table type string len 200 size 100k store gpt0",
        f"backend {FENCE_TABLE}",
        "    stick-table type string len 16 size 1 store gpt0",
    ]
    return "\n".join(lines) + "\n"
