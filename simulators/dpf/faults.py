"""DPU faults injected by the operator (`/sim/faults/dpus/...`) and the DPUSet's drift report.

- `inject_error`: phase `Error`, `Ready=False` with the given message, until the DPU is deleted
  (reprovisioned); it also leaves any reboot round of its node. A DPU being deleted is refused
  (409): its deletion goes on.
- `inject_node_effect`: a `Ready` DPU back to `Node Effect` (a critical DPU service is down);
  it stays there until `recover` (then `DPU Cluster Config -> Node Effect Removal -> Ready`)
  or until it is reprovisioned.
- `outdated`: a DPU whose BFB or flavor differs from its DPUSet's template reports
  `status.outdated` {timeStamp, reason, message} (the field of newer DPF releases) and a
  condition `Outdated=True` with the same reason (`OutdatedBFB`, `OutdatedDPUFlavor`). The
  v25.10 DPU CRD served here has no `status.outdated`, so the API server prunes it and only
  the condition is visible; both go away when the DPU matches again.
"""

from __future__ import annotations

from simulators.dpf.model import (
    CLUSTER_CONFIG,
    ERROR,
    NODE_EFFECT,
    READY,
    Object,
    deleting,
    now_rfc3339,
    phase,
    set_condition,
)
from simulators.dpf.provisioning import Provisioner


def inject_error(p: Provisioner, name: str, message: str) -> None:
    obj = _existing(p, name)
    if deleting(obj):
        # Its timer is the deletion's: cancelling it left the DPU in Error, never deleted and so
        # never recreated, and the reprovision that deleted it waiting for a DPU that never came.
        raise ValueError(f"DPU {name} is being deleted; inject the error into the DPU DPF creates next")
    p.timers.cancel(name)
    p.leave_round(name)
    p.services_down.discard(name)
    p.set_phase(name, obj["metadata"]["uid"], ERROR, reason="DPUError", message=message)


def inject_node_effect(p: Provisioner, name: str) -> None:
    obj = _existing(p, name)
    if phase(obj) != READY:
        raise ValueError(f"DPU {name} is in phase {phase(obj)!r}; only a Ready DPU can lose its services")
    p.services_down.add(name)
    p.set_phase(
        name,
        obj["metadata"]["uid"],
        NODE_EFFECT,
        reason="CriticalDPUServiceNotReady",
        message="a critical DPU service is not ready",
    )


def recover(p: Provisioner, name: str) -> None:
    obj = _existing(p, name)
    if name not in p.services_down or phase(obj) != NODE_EFFECT:
        raise ValueError(f"DPU {name} has no injected service failure to recover from")
    p.services_down.discard(name)
    if p.set_phase(name, obj["metadata"]["uid"], CLUSTER_CONFIG) is not None:
        p.reconcile(name)


def _existing(p: Provisioner, name: str) -> Object:
    obj = p.client.get(p.client.dpu, name)
    if obj is None or deleting(obj):
        raise KeyError(name)
    return obj


def outdated(p: Provisioner, obj: Object, bfb: str, flavor: str) -> None:
    """Report (or clear) the DPU's drift from its DPUSet's template."""
    name, spec = obj["metadata"]["name"], obj.get("spec") or {}
    drift = []
    if spec.get("bfb") != bfb:
        drift.append(("OutdatedBFB", f"BFB: {spec.get('bfb')} -> {bfb}"))
    if spec.get("dpuFlavor") != flavor:
        drift.append(("OutdatedDPUFlavor", f"DPUFlavor: {spec.get('dpuFlavor')} -> {flavor}"))

    def change(o: Object) -> bool:
        status = o.setdefault("status", {})
        if not drift:
            had = status.pop("outdated", None) is not None
            conds = [c for c in status.get("conditions") or [] if c.get("type") != "Outdated"]
            changed = had or len(conds) != len(status.get("conditions") or [])
            status["conditions"] = conds
            return changed
        reason = drift[0][0]
        message = f"DPU template has changed ({', '.join(d for _, d in drift)})"
        # The condition decides: `status.outdated` may have been pruned by the served schema.
        if not set_condition(status, "Outdated", True, reason, message):
            return False
        status["outdated"] = {"timeStamp": now_rfc3339(), "reason": reason, "message": message}
        return True

    p.client.mutate(p.client.dpu, name, change, status=True)
