"""The in-process fleet twin as a source: each node's vLLM-style text (plus the engine extension) to the catalog.

A twin target (`kind: twin` in the fleet file) builds the twin from the same fleet file
(`infercast.simulator.twin.build_fleet`), advances it on request (`advance`; the CLI does it for a warm-up with
`--once`, or in a background thread in real time when serving) and scrapes every node through the same vLLM parser a
real engine goes through.  A node that is down (OOM, cold start) renders nothing: it gets `infercast_target_up 0`
(`target` = node name, `kind="twin"`) and no serving series.  The twin's router records into a `RouterRecorder`
whose counters are exported too.  Windowed ratios run on simulated time.

The twin is not thread-safe: every call into it holds this source's lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from infercast.config import FleetConfig
from infercast.exporters import vllm
from infercast.exporters.base import SERVING_UP, Sample, ScrapeError, Target, served_models
from infercast.exporters.router import recorder_samples

log = logging.getLogger(__name__)


def _default_factory(config: FleetConfig) -> Any:
    # imported lazily: the twin is only needed for twin targets
    from infercast.exporters.router import RouterRecorder
    from infercast.simulator.twin.fleet import build_fleet

    return build_fleet(config, seed=0, recorder=RouterRecorder())


class TwinSource:
    kind = "twin"

    def __init__(
        self,
        config: FleetConfig,
        name: str = "twin",
        fleet: Any | None = None,
        factory: Callable[[FleetConfig], Any] = _default_factory,
    ) -> None:
        self.name = name
        self.config = config
        self._fleet = fleet
        self._factory = factory
        self._lock = threading.Lock()
        self._models = served_models(config)

    @property
    def fleet(self) -> Any:
        if self._fleet is None:
            self._fleet = self._factory(self.config)
        return self._fleet

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.fleet.advance(seconds)

    def now(self) -> float:
        with self._lock:
            return float(self.fleet.now)

    def _target(self, node: Any) -> Target:
        """The node as a target whose pool is the twin's own `node.pool`, never one looked up by version.

        The fleet file's pools are not the twin's when a layout splits them (`protections.context_pools`: v4-short
        and v4-long, both serving v4) or the autoscaler moves a standby node into a pool; a pool found through the
        node's version would label both halves as one.  Telling `Target` that the node's pool serves the node's
        version makes `serving_labels` keep it.
        """
        return Target(
            name=node.name,
            kind="twin",
            pool=node.pool,
            version=node.version,
            models=self._models,
            pools_by_version={node.version: node.pool},
            pool_versions={node.pool: node.version},
        )

    def collect(self) -> list[Sample]:
        with self._lock:
            try:
                fleet = self.fleet
                nodes = [(n, bool(n.up), n.metrics_text() if n.up else "") for n in fleet.nodes]
                router = recorder_samples(fleet.recorder) if getattr(fleet, "recorder", None) is not None else []
            except Exception as e:
                raise ScrapeError(f"twin failed: {type(e).__name__}: {e}") from None
        out: list[Sample] = []
        for node, up, text in nodes:
            if not up and getattr(node, "up_at", 0.0) == float("inf"):
                continue  # a cold-standby node that was never started is not a target (not "down"); see module doc
            up_labels = {"target": node.name, "kind": "twin", "pool": node.pool, "version": node.version}
            if up and text.strip():
                try:
                    out.extend(vllm.parse(text, self._target(node)))
                except ScrapeError as e:
                    log.warning("twin node %s: %s", node.name, e)
                    up = False
            else:
                up = False
            out.append(Sample(SERVING_UP, up_labels, 1.0 if up else 0.0))
        return out + router
