"""DPU faults injected by the operator (`/sim/faults/dpus/...`) and the DPUSet's drift report.

- `inject_error`: phase `Error`, `Ready=False` with the given message, until the DPU is deleted
  (reprovisioned); it also leaves any reboot round of its node. A DPU being deleted is refused
  (409): its deletion goes on.
- `inject_node_effect`: a `Ready` DPU back to `Node Effect` (a critical DPU service is down);
  it stays there until `recover` (then `DPU Cluster Config -> Node Effect Removal -> Ready`)
  or until it is reprovisioned.
- `inject` (the rest, by name; a wrong body is a TypeError naming what was wrong, and changes
  nothing):
  - `error` with `{"reason": R}` (without a reason: `inject_error`'s generic Error): `Error`
    with DPF's own condition for that reason (`ERROR_REASONS`:
    BFBTransferred/FailToInstall, OSInstalled/InstallationTerminated, Rebooted/RebootFailed, ...).
  - `agent` `{"methods": [...]}`: the reboot methods the DPU agent reports next (v26), e.g. a
    reboot loop `["SystemReboot"] * 7`; each must be one of `REBOOT_METHODS`.
  - `install-fails`: the DPU's next install (now, or after its next reprovision) ends at the end
    of `OS Installing` in `Error` with reason `FailToInstall` (condition `BFBTransferred`);
    `recover` disarms it before it is hit. Once hit, the Error lasts until a reprovision.
  - `phase` `{"phase": P, "seconds": S}`: the next time DPF moves the DPU on, it passes through
    phase P for S seconds first (a build whose phases the client may not know); P must be one
    the served DPU CRD allows.
  - `warm-reset-ignored` `{}` (v26; ours, BEHAVIOUR.md A4): from now on a warm reset of the
    host (ForceRestart, GracefulRestart) does not reach this DPU: its agent does not start
    again, so DPF, back in `DPU Config` after the reboot, waits for a fresh report. A cold one
    (a power cycle, ForceOff then On) does.
  - `arm-shutdown-hangs` `{}` (v26; ours, BEHAVIOUR.md R2): from now on the agent's shutdown
    for a SystemLevelReset does not take this DPU's Arm down: its BMC keeps showing it `On`, so
    DPF holds WaitForShutdown until `arm_shutdown_timeout_seconds` and then releases it with
    reason `DPUArmShutdownWaitTimeout`.
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

# Reasons DPF gives an `Error`, the condition it sets them on, and the source (BEHAVIOUR.md E1-E5).
ERROR_REASONS = {
    "FailToInstall": ("BFBTransferred", "RN-26.4/26.8 known issue #4957820 (zero trust)"),
    "InstallationTerminated": ("OSInstalled", "RN-26.4/26.8 known issue #4930198 (host trusted)"),
    "RebootFailed": ("Rebooted", "DPF dpu/state/rebooting.go checkRebootTask"),
    "UnsupportedNodeRebootMethod": ("Rebooted", "DPF dpu/state/redfish/rebooting.go"),
    "NodeRebootMethodNotProvided": ("Rebooted", "DPF dpu/state/redfish/rebooting.go"),
    # The timeout is upstream's (RN-26.4 #4952676); the condition and reason names are ours.
    "NodeEffectRemovalTimeout": ("NodeEffectRemoved", "RN-26.4 #4952676; names are the simulator's"),
}
REBOOT_METHODS = ("Unknown", "NoAction", "PowerCycle", "SystemReboot", "SystemLevelReset", "FirmwareReset",
                  "DPUWarmReboot")  # fmt: skip


def inject(
    p: Provisioner, served_phases: tuple[str, ...], name: str, fault: str, body: dict[str, object]
) -> None:
    """The faults beyond error/node-effect/recover, by name; see the module docstring."""
    if fault == "error":
        reason = body.get("reason")
        if reason not in ERROR_REASONS:
            raise TypeError(f"`reason` must be one of {', '.join(ERROR_REASONS)}; got {reason!r}")
        inject_error(p, name, str(body.get("message") or f"injected: {reason}"), reason=str(reason))
    elif fault == "agent":
        methods = body.get("methods")
        if not isinstance(methods, list) or not methods or any(m not in REBOOT_METHODS for m in methods):
            raise TypeError(
                f"`methods` must be a non-empty list of {', '.join(REBOOT_METHODS)}; got {methods!r}"
            )
        if not p.v26:
            raise ValueError("the DPU agent's reboot methods are DPF v26 behaviour: serve --dpf-version 26")
        _existing(p, name)
        p.agent_faults[name] = [str(m) for m in methods]
    elif fault == "install-fails":
        _existing(p, name)
        p.install_failures.add(name)
    elif fault == "phase":
        target, seconds = body.get("phase"), body.get("seconds", 1.0)
        if target not in served_phases:
            raise TypeError(f"`phase` must be one the served DPU CRD allows ({', '.join(served_phases)}); "
                            f"got {target!r}")  # fmt: skip
        if not isinstance(seconds, int | float) or seconds < 0:
            raise TypeError(f"`seconds` must be a number >= 0; got {seconds!r}")
        _existing(p, name)
        p.detours[name] = (str(target), float(seconds))
    elif fault == "warm-reset-ignored":
        if not p.v26:
            raise ValueError("the DPU agent's start time is DPF v26 behaviour: serve --dpf-version 26")
        _existing(p, name)
        p.warm_reset_ignored.add(name)
    elif fault == "arm-shutdown-hangs":
        if not p.v26:
            raise ValueError("WaitForShutdown is DPF v26 behaviour: serve --dpf-version 26")
        _existing(p, name)
        p.arm_shutdown_hangs.add(name)
    else:
        raise LookupError(
            f"unknown DPU fault {fault!r}; "
            "one of error, node-effect, recover, install-fails, agent, phase, warm-reset-ignored, "
            "arm-shutdown-hangs"
        )


def inject_error(p: Provisioner, name: str, message: str, *, reason: str | None = None) -> None:
    obj = _existing(p, name)
    if deleting(obj):
        # Its timer is the deletion's: cancelling it left the DPU in Error, never deleted and so
        # never recreated, and the reprovision that deleted it waiting for a DPU that never came.
        raise ValueError(f"DPU {name} is being deleted; inject the error into the DPU DPF creates next")
    p.timers.cancel(name)
    p.leave_round(name)
    p.services_down.discard(name)
    uid = obj["metadata"]["uid"]
    p.set_phase(name, uid, ERROR, reason=reason or "DPUError", message=message)
    if reason is not None:
        ctype = ERROR_REASONS[reason][0]

        def change(o: Object) -> bool:
            return o["metadata"]["uid"] == uid and set_condition(o.setdefault("status", {}), ctype, False,
                                                                 reason, message)  # fmt: skip

        p.client.mutate(p.client.dpu, name, change, status=True)


def fail_install(p: Provisioner, name: str) -> None:
    """The install of an armed DPU (`install-fails`) ends in `Error`, reason `FailToInstall`."""
    inject_error(p, name, "injected: the BFB installation failed", reason="FailToInstall")


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
    if name in p.install_failures:  # an install failure not yet hit: disarmed
        p.install_failures.discard(name)
        return
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
