"""Scaling that cooperates with the autoscaler, as a `FleetAdmin`: a pool's `HorizontalPodAutoscaler`
(autoscaling/v2) or KEDA `ScaledObject` keeps owning its replica count, and the actuator moves only its floor
(`spec.minReplicas`, `spec.minReplicaCount`).  A replica count an autoscaler owns is never written: the autoscaler
would put it back within one sync period (15 s), and the two would fight.

- `scale_pool(pool, n)`: the floor becomes `n` -- raised ahead of a forecast surge, lowered again to release it
  (the policy's "relax" steps, or a rollback: `Result.previous` is the floor before).  The autoscaler may run more
  replicas than the floor whenever its own metrics ask for them.  `n` above the autoscaler's ceiling
  (`maxReplicas`, `maxReplicaCount`) is refused: the ceiling is the owner's budget and is never raised here.  An
  HPA's floor is at least 1 (scale to zero is KEDA's).
- `prewarm_pool(pool)`: the floor becomes the pool's fleet-file `nodes` (never lowered), capped at the ceiling.
- `set_pool_bounds(pool, floor, ceiling)`: the controller's reserve plan (`actuators/reserve.py`): the floor and
  the ceiling in one patch, so the autoscaler's own reaction to a surge starts the standby nodes for the pool the
  plan earmarks them for and no other (the twin's `arms.Hpa` honours the same two fields).  The owner's ceiling
  is the budget: the first write keeps it in the annotation `infercast.io/owner-max-replicas`, and no ceiling is
  ever set above it (a lowered ceiling is raised back to it, never past it).
- `observe()`: per pool, `replicas` is the floor (what the actuator sets, so a floor it raised reads back as
  applied), `ready` the scale target's ready replicas (its Deployment or StatefulSet), `spare` the ceiling less the
  floor (how far the floor may still go).

Each write is a `GET` then a `PATCH` carrying the `resourceVersion` read, so a change made in between (the KEDA
operator, a person, `kubectl apply`) is a 409 Conflict, retried from a fresh read, never overwritten.  With
`server_dry_run` every write goes with `dryRun=All`: the API server validates and admits it and persists nothing.
Absolute floors are idempotent; the API cannot check a fencing token, so the Lease elector's check before each tick
is the guard.

`autoscalers_targeting()` is how the `kubernetes` backend refuses to scale a Deployment an autoscaler owns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from infercast.actuators.actions import Action, PrewarmPool, ScalePool, SetPoolBounds
from infercast.actuators.admin import ActionRefused, Observation, PoolState, Result
from infercast.actuators.kube import CustomObjects, call, call_or_none
from infercast.config import FleetConfig

KEDA = ("keda.sh", "v1alpha1", "scaledobjects")
#: where the owner's ceiling is kept once the reserve plan has lowered it (set_pool_bounds)
OWNER_CEILING = "infercast.io/owner-max-replicas"
#: KEDA's defaults for a ScaledObject that leaves them out (keda.sh/v1alpha1)
KEDA_MIN_DEFAULT = 0
KEDA_MAX_DEFAULT = 100


@dataclass(frozen=True)
class Floor:
    """One autoscaler as read: its floor and ceiling, what it scales, and the resourceVersion to write against."""

    kind: str  # HorizontalPodAutoscaler | ScaledObject
    name: str
    floor: int
    ceiling: int
    target_kind: str
    target_name: str
    resource_version: str
    owner_ceiling: int | None = None  # the ceiling its owner set, kept before the reserve plan lowered it

    @property
    def field(self) -> str:
        return "minReplicas" if self.kind == "HorizontalPodAutoscaler" else "minReplicaCount"

    @property
    def lowest(self) -> int:
        return 1 if self.kind == "HorizontalPodAutoscaler" else 0


class AutoscalerFloors(CustomObjects):
    name = "autoscaler"

    def __init__(self, api: Any, section: Any, fleet: FleetConfig) -> None:
        from kubernetes import client

        super().__init__(api, section, fleet)
        self.hpas = client.AutoscalingV2Api(api)
        self.apps = client.AppsV1Api(api)
        self.autoscalers = dict(section.autoscalers)  # pool -> AutoscalerTarget (kind, name)

    # --- FleetAdmin ------------------------------------------------------------------------------------------
    def observe(self) -> Observation:
        return Observation(time.time(), tuple(self.pool_state(pool) for pool in self.autoscalers))

    def pool_state(self, pool: str) -> PoolState:
        f = self.read(pool)
        pc = self.fleet.pools[pool]
        return PoolState(
            name=pool,
            version=pc.version,
            replicas=f.floor,
            ready=self._ready(f),
            weight=pc.weight,
            standby=pc.standby and f.floor == 0,
            min_context_tokens=pc.min_context_tokens,
            max_context_tokens=pc.max_context_tokens,
            spare=max(0, f.ceiling - f.floor),
        )

    def apply(self, action: Action) -> Result:
        if isinstance(action, SetPoolBounds):
            return self._bounds(action)
        if not isinstance(action, ScalePool | PrewarmPool):
            raise ActionRefused(
                f"the autoscaler backend only moves HPA / ScaledObject floors and ceilings (scale_pool, prewarm_pool, "
                f"set_pool_bounds); {action.kind} needs an HTTPRoute or a router backend"
            )
        f = self.read(action.pool)
        where = f"{f.kind} {self.namespace}/{f.name}"
        if isinstance(action, PrewarmPool):
            nodes = self.fleet.pools[action.pool].nodes
            want = max(f.floor, min(nodes, f.ceiling))
        else:
            want = action.replicas
            if want > f.ceiling:
                raise ActionRefused(
                    f"{where}: a floor of {want} is above its ceiling ({f.ceiling}, spec.{_ceiling(f)}); the actuator "
                    "never raises an autoscaler's ceiling"
                )
            if want < f.lowest:
                raise ActionRefused(
                    f"{where}: spec.minReplicas is at least 1 (scale to zero needs a ScaledObject), asked {want}"
                )
        undo = ScalePool(action.pool, f.floor)
        if want == f.floor:
            return Result("applied", f"{where} already has {f.field} {want}", undo)
        self._patch(f, {"metadata": {"resourceVersion": f.resource_version}, "spec": {f.field: want}})
        note = self.dry_run_note
        capped = (
            " (capped at its ceiling)"
            if isinstance(action, PrewarmPool) and want < self.fleet.pools[action.pool].nodes
            else ""
        )
        return Result("applied", f"{where} {f.field} {f.floor} -> {want}{capped}{note}", undo)

    def _bounds(self, action: SetPoolBounds) -> Result:
        f = self.read(action.pool)
        where = f"{f.kind} {self.namespace}/{f.name}"
        owner = f.owner_ceiling if f.owner_ceiling is not None else f.ceiling
        if action.ceiling > owner:
            raise ActionRefused(
                f"{where}: a ceiling of {action.ceiling} is above the one its owner set ({owner}); the actuator "
                "never raises an autoscaler's ceiling past its owner's"
            )
        if action.floor < f.lowest:
            raise ActionRefused(f"{where}: spec.{f.field} is at least {f.lowest}, asked {action.floor}")
        undo = SetPoolBounds(action.pool, f.floor, f.ceiling)
        if (action.floor, action.ceiling) == (f.floor, f.ceiling):
            return Result("applied", f"{where} already has {f.field} {f.floor}, {_ceiling(f)} {f.ceiling}", undo)
        body = {
            "metadata": {"resourceVersion": f.resource_version, "annotations": {OWNER_CEILING: str(owner)}},
            "spec": {f.field: action.floor, _ceiling(f): action.ceiling},
        }
        self._patch(f, body)
        note = self.dry_run_note
        return Result(
            "applied",
            f"{where} {f.field} {f.floor} -> {action.floor}, {_ceiling(f)} {f.ceiling} -> {action.ceiling}{note}",
            undo,
        )

    def _patch(self, f: Floor, body: dict) -> None:
        if f.kind == "HorizontalPodAutoscaler":
            call(self.hpas.patch_namespaced_horizontal_pod_autoscaler, f.name, self.namespace, body,
                 dry_run=self.dry_run, timeout=self.timeout)  # fmt: skip
        else:
            call(self.custom.patch_namespaced_custom_object, *KEDA[:2], self.namespace, KEDA[2], f.name, body,
                 dry_run=self.dry_run, timeout=self.timeout)  # fmt: skip

    # --- reads -----------------------------------------------------------------------------------------------
    def read(self, pool: str) -> Floor:
        t = self.autoscalers.get(pool)
        if t is None:
            raise ActionRefused(
                f"no autoscaler is mapped to pool {pool!r} (actuator.backend.autoscalers has "
                f"{sorted(self.autoscalers)})"
            )
        if t.kind == "HorizontalPodAutoscaler":
            h = call(self.hpas.read_namespaced_horizontal_pod_autoscaler, t.name, self.namespace, timeout=self.timeout)
            ref = h.spec.scale_target_ref
            return Floor(
                t.kind,
                t.name,
                int(h.spec.min_replicas if h.spec.min_replicas is not None else 1),
                int(h.spec.max_replicas),
                ref.kind,
                ref.name,
                h.metadata.resource_version,
                _owner(h.metadata.annotations),
            )
        so = call(self.custom.get_namespaced_custom_object, *KEDA[:2], self.namespace, KEDA[2], t.name,
                  timeout=self.timeout)  # fmt: skip
        spec = so.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        return Floor(
            t.kind,
            t.name,
            int(spec.get("minReplicaCount", KEDA_MIN_DEFAULT)),
            int(spec.get("maxReplicaCount", KEDA_MAX_DEFAULT)),
            ref.get("kind") or "Deployment",
            ref.get("name", ""),
            (so.get("metadata") or {}).get("resourceVersion", ""),
            _owner((so.get("metadata") or {}).get("annotations")),
        )

    def _ready(self, f: Floor) -> int:
        read = {
            "Deployment": self.apps.read_namespaced_deployment,
            "StatefulSet": self.apps.read_namespaced_stateful_set,
        }
        fn = read.get(f.target_kind)
        if fn is None or not f.target_name:
            return 0  # a kind whose readiness this does not read: nothing counts as ready
        obj = call(fn, f.target_name, self.namespace, timeout=self.timeout)
        return int((obj.status and obj.status.ready_replicas) or 0)


def _owner(annotations: dict | None) -> int | None:
    """The owner's ceiling kept in the annotation, if it is there and a whole number (else: not known)."""
    raw = (annotations or {}).get(OWNER_CEILING)
    try:
        return int(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


def _ceiling(f: Floor) -> str:
    return "maxReplicas" if f.kind == "HorizontalPodAutoscaler" else "maxReplicaCount"


def autoscalers_targeting(api: Any, namespace: str, kind: str, name: str, timeout: float) -> list[str]:
    """`Kind/name` of every HPA and ScaledObject in `namespace` that scales `kind`/`name`.  A cluster without KEDA
    (no ScaledObject API: 404) has none of those; a list the API refuses (RBAC) is `ActionRefused`, since an
    autoscaler nobody could look for may be there."""
    from kubernetes import client

    found = []
    hpas = call(client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler, namespace, timeout=timeout)
    for h in hpas.items or []:
        ref = h.spec.scale_target_ref
        if ref.kind == kind and ref.name == name:
            found.append(f"HorizontalPodAutoscaler/{h.metadata.name}")
    custom = client.CustomObjectsApi(api)
    sos = call_or_none(custom.list_namespaced_custom_object, *KEDA[:2], namespace, KEDA[2], timeout=timeout)
    for so in (sos or {}).get("items") or []:
        ref = (so.get("spec") or {}).get("scaleTargetRef") or {}
        if (ref.get("kind") or "Deployment") == kind and ref.get("name") == name:
            found.append(f"ScaledObject/{(so.get('metadata') or {}).get('name')}")
    return found
