"""What each BMC keeps across a restart of the simulator (`simulators.persist` saves it with the site).

A BMC's system power state and its firmware survive a restart of whatever manages the site:
the host stays Off when the manager that turned it Off restarts, and a DPU runs (and has staged)
the firmware it had. DSP0266 makes `PowerState` the system's state, not the service's. The
simulator restarted on the same state dir (`--persist`, as `metalflow dev` runs it) is such a
restart, so it serves what each BMC served before (redfish BEHAVIOUR.md L1, L2):

- a host: `LastResetTime`, its power state and a power transition in flight (the state it
  settled in last and the states still to reach; the transition resumes at start, its leg
  counted afresh, so a reset accepted before the restart still happens; its task monitor is not
  kept: a `202` reset's task is gone), and its power log, the newest `LOG_KEPT` transitions (a
  real BMC keeps its event log across its own restart; an operator rehearsing a restart in the
  middle of a power cycle reads the Off before it and the On after it in one log, attack 40f);
- a DPU: `LastResetTime`, the NIC firmware running and staged, and its Arm: powered or not
  (its host's power), Paused (UEFI shell, Arm shutdown), a latched PowerCycle. An Arm boot in
  progress is kept as finished (`OsIsRunning`); a SimpleUpdate staging in flight is lost (its
  task is gone, nothing staged: SimpleUpdate again).

Not kept: sessions, tasks, request counts, named faults (`/sim/faults`).
"""

from __future__ import annotations

from typing import Any, Final

from .dpu import BOOT_STAGES, DPUBMC
from .host import HostBMC

LOG_KEPT: Final = 200  # power log entries a host keeps across a restart (a few kB per host)

_LEFT = {"PoweringOff": "On", "PoweringOn": "Off"}  # the settled state a transition leg left


def host_state(host: HostBMC) -> dict[str, Any]:
    """What a host BMC keeps: its mark, settled power state and the transition still to run."""
    power = _LEFT.get(host.power, host.power)
    kept: dict[str, Any] = {"last_reset_time": host.last_reset_time, "power": power}
    if host.pending:
        kept["pending"], kept["reset_type"] = list(host.pending), host.reset_type
    if host.log:
        kept["log"] = [dict(entry) for entry in host.log[-LOG_KEPT:]]
    return kept


def dpu_state(dpu: DPUBMC) -> dict[str, Any]:
    """What a DPU BMC keeps: its mark, firmware and Arm state."""
    return {
        "last_reset_time": dpu.last_reset_time, "running": dpu.running, "staged": dpu.staged,
        "powered": dpu.powered, "paused": dpu.paused, "latched": dpu.latched, "arm": dpu.arm,
        "arm_since": dpu.arm_since,
    }  # fmt: skip


def restore_host(host: HostBMC, kept: dict[str, Any]) -> None:
    """Take a kept host state back (a transition is resumed later, by `PowerControl.resume`)."""
    host.last_reset_time = str(kept.get("last_reset_time") or host.last_reset_time)
    log = kept.get("log")
    if isinstance(log, list):  # a snapshot from before the log was kept has none
        host.log = [dict(entry) for entry in log if isinstance(entry, dict)][-LOG_KEPT:] or None
    if kept.get("power") in ("On", "Off"):
        host.power = kept["power"]
        host.pending = tuple(state for state in kept.get("pending") or () if state in ("On", "Off"))
        host.reset_type = kept.get("reset_type") if host.pending else None


def restore_dpu(dpu: DPUBMC, kept: dict[str, Any]) -> None:
    """Take a kept DPU state back; an Arm boot that was under way is kept as finished."""
    dpu.last_reset_time = str(kept.get("last_reset_time") or dpu.last_reset_time)
    if "running" not in kept:
        return  # a snapshot from before the firmware was kept: its mark only
    dpu.running, dpu.staged = str(kept["running"]), kept.get("staged")
    dpu.powered, dpu.paused, dpu.latched = bool(kept["powered"]), bool(kept["paused"]), bool(kept["latched"])
    dpu.arm, dpu.arm_since = str(kept["arm"]), str(kept.get("arm_since") or "")
    if dpu.powered and not dpu.paused and dpu.arm in BOOT_STAGES:
        dpu.arm = BOOT_STAGES[-1]
