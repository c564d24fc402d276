"""Which predictor replica forecasts which series: N replicas split the fleet by a stable hash of (pool, version).

The hash is Prometheus' own `hashmod` relabel action over the labels `pool` and `version`: the MD5 of the values
joined by `;`, its last 8 bytes read as a big-endian unsigned integer, modulo N.  So a user can see (or check) the
split with the same relabel rule Prometheus uses to shard scrape targets, and the split depends on nothing but the
two label values and N: no coordination, no state, the same answer in every replica and after every restart.

`ShardedStore` wraps the store the predictor reads: every series whose (pool, version) belongs to another shard is
dropped from the answer, so the unchanged `PredictorLoop` forecasts, and publishes, only this replica's share.
What a replica reads is still the whole fleet (PromQL has no hash function to filter with); the forecasting, which
is where the time goes, is what splits.  Series without a `pool` label are kept by shard 0 only.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from dataclasses import dataclass

from infercast.store import Series, Store

#: the environment variable `infercast predictor` reads when `--shard` is not given
SHARD_ENV = "INFERCAST_PREDICTOR_SHARD"
_SPEC = re.compile(r"^(?P<index>\d+|ordinal)/(?P<count>\d+)$")
_ORDINAL = re.compile(r"-(\d+)$")


def hashmod(values: tuple[str, ...], modulus: int, separator: str = ";") -> int:
    """Prometheus' `action: hashmod` (model/relabel/relabel.go) over the joined label values."""
    digest = hashlib.md5(separator.join(values).encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[8:], "big") % modulus


def shard_of(pool: str, version: str, count: int) -> int:
    """The shard (0 .. count-1) that forecasts (pool, version)."""
    return hashmod((pool, version), count)


@dataclass(frozen=True)
class Shard:
    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index}/{self.count}: need count >= 1 and 0 <= index < count")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, labels: dict[str, str]) -> bool:
        pool = labels.get("pool")
        if not pool:
            return self.index == 0
        return self.count == 1 or shard_of(pool, labels.get("version", ""), self.count) == self.index

    @classmethod
    def parse(cls, text: str, hostname: str | None = None) -> Shard:
        """`I/N`, or `ordinal/N`: I is the number that ends the host name (a StatefulSet pod's `name-2` -> 2)."""
        m = _SPEC.match(text.strip())
        if not m:
            raise ValueError(f"shard {text!r}: expected I/N (e.g. 0/2) or ordinal/N")
        if m["index"] == "ordinal":
            host = hostname if hostname is not None else socket.gethostname()
            o = _ORDINAL.search(host)
            if not o:
                raise ValueError(f"shard {text!r}: host name {host!r} does not end in -<ordinal>")
            index = int(o.group(1))
        else:
            index = int(m["index"])
        return cls(index, int(m["count"]))

    @classmethod
    def from_env(cls, value: str | None = None) -> Shard:
        """`--shard` when given, else $INFERCAST_PREDICTOR_SHARD, else the whole fleet (0/1)."""
        text = value if value is not None else os.environ.get(SHARD_ENV, "")
        return cls.parse(text) if text.strip() else cls()


class ShardedStore:
    """A store that answers only with the series of one shard (see the module docstring)."""

    def __init__(self, store: Store, shard: Shard) -> None:
        self.store = store
        self.shard = shard

    def query_range(
        self, metric: str, matchers: dict[str, str] | None, start: float, end: float, step: float
    ) -> list[Series]:
        return [s for s in self.store.query_range(metric, matchers, start, end, step) if self.shard.owns(s.labels)]
