"""The barriers of a host operation, as pure functions of one `HostDPFState`.

No Temporal here, not even an import (so a workflow's `state.py` may use it): the workflow asks
these questions of the newest state the watcher sent, and tests ask them of hand-written states.
Workflows import it inside `workflow.unsafe.imports_passed_through()`, which passes its own
imports through too. "The DPUs" are the DPUs under the operation; safety checks
look at every DPU of the host.

Why the reboot barrier waits for EVERY DPU (docs/DOMAIN.md sections 1 and 2.5, the RFC's hard case): DPF puts
the reboot-required annotation on the DPUNode when the FIRST DPU reaches `Rebooting`; a sibling
may still be writing its OS. Power-cycling then corrupts the sibling's install. So the host is
cycled only when the annotation is present, every DPU is in `Rebooting` (or already `Ready`: it
needs no reboot), and no DPU of the host is in an install phase.

Two more conditions (DOMAIN.md 2.5): no DPU of the host is in `WaitForShutdown` (v26
`rebootStatus`: its Arm OS is shutting down for a SystemLevelReset; a reset now cuts that short),
and every `Rebooting` DPU of the host is stamped `WaitingForManualPowerCycleOrReboot` (DPF's
Step 2: a removal before it is undone by DPF, which then waits for yet another reboot): in
`rebootStatus` where the DPU has one, else in its `Rebooted` condition (v26.4.0-rc.3, NICo's pin,
and v25.10 have no `rebootStatus`). Phases this module does not know are progress: only the
named sets below decide, and an unknown phase is in none of them.

Also here, as pure functions: the host reset a reboot method needs (`host_reset_for`), the Error
reasons reprovisioning cannot fix (`PARK_REASONS`), phase moves DPF does not make by itself
(`went_back`), and the DPUs a reboot of ours did not reach (`not_restarted`: their agent did not
start again).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple

from contracts.models.dpf import (
    PHASE_DELETING,
    PHASE_ERROR,
    PHASE_NODE_EFFECT,
    PHASE_READY,
    PHASE_REBOOTING,
    DPUState,
    HostDPFState,
    method_rank,
)

INSTALL_PHASES: Final = frozenset(
    {
        # A host power cycle in these corrupts the DPU's install:
        "Config FW Parameters", "Prepare BFB", "OS Installing",
        # DPF v26 defers its own reboot request while a sibling is in these (`HandleRebootSync`):
        "Initialize Interface", "DPU Config",
        # v26: flashing BF4 firmware, and Arm restarts DPF runs itself (ours: not cut short).
        "Update Firmware", "Perform ARM Force Restart",
    }
)  # fmt: skip
"""Phases of any DPU of the host during which the host is not power-cycled."""

WARM_METHODS: Final = frozenset(
    {"SystemLevelReset", "SystemReboot", "FirmwareReset", "DPUWarmReboot", "NoAction"}
)
"""Reboot methods a warm host reset meets (DOCA "Reset and Reboot Procedures": a system-level
reset is the Arm shut down, then a warm reboot of the server); `PowerCycle`, `Unknown` and no
method at all (DPF before v26) get a cold power cycle, which meets every method."""

PARK_REASONS: Final = frozenset(
    {"UnsupportedNodeRebootMethod", "NodeRebootMethodNotProvided", "HostAgentRebootMethodNotSupported",
     "HostlessStatusNotSet"}
)  # fmt: skip
"""Error reasons of a DPF configuration problem (DPF `dpu/state/redfish/rebooting.go`): deleting
the DPU recreates it into the same Error, so the operation parks for an operator instead."""

PHASE_ORDER: Final = (
    "Initializing", "Pending", "Node Effect", "Initialize Interface",
    "Config FW Parameters", "Update Firmware", "Prepare BFB", "OS Installing", "DPU Config", "Rebooting",
    "Checking Host Reboot Required",
    "Host Network Configuration", "DPU Cluster Config", "Service Readiness", "Node Effect Removal", "Ready",
)  # fmt: skip
"""The known phases in the order DPF moves a DPU (v25.10 and v26 together), one order both trust
modes follow: a host-trusted DPF visits `Host Network Configuration` BEFORE `DPU Cluster Config`
(after the agent's NoAction or the host reboot), a zero-trust one skips it (DPF
`internal/provisioning/controllers/dpu/state/dpu_config.go` c=62099c8b l.66-71, `rebooting.go`
c=c406f0c5 `reconcileHostRebootPhase` cases 3-4, `hostagent/hostnetworkconfig.go` c=0813ef24 and
`gnoi/hostnetworkconfig.go` c=785d5190: `Host Network Configuration -> DPU Cluster Config`; the
same order at the v24.10.0-rc.6 tag, `state/rebooting.go` -> `hostnetworkconfig.go`). So the
product need not know the mode (simulators/dpf/BEHAVIOUR.md P1). A BF4 flashes its firmware
after `Config FW Parameters` (redfish `config_fw_params.go`: BF4 -> `Update Firmware`;
`firmware_update.go` c=e3a3c89b -> `Prepare BFB`), and `Service Readiness` comes between
`DPU Cluster Config` and `Node Effect Removal` (`dpu_cluster_config.go` index id 57500249449,
`service_readiness.go` c=ce4bd987); until the issue 36 re-audit this order had both the other
way round, and a real v26 DPU's `Service Readiness -> Node Effect Removal` read as a move back."""

DPF_LOOPS: Final = frozenset(
    {("Rebooting", "DPU Config"), ("Rebooting", "Initialize Interface"), ("Rebooting", "Update Firmware"),
     ("Checking Host Reboot Required", "Rebooting"), ("Ready", "Node Effect"),
     ("Ready", "DPU Cluster Config")}
)  # fmt: skip
"""Backward moves DPF makes by itself: back to the agent after a reboot (v26), back to a BF4's
firmware flash after its power cycle (v26 `rebooting.go`), a BF4's second
round (v25.10), a Ready DPU whose critical services went down (flow 5, the monitor's), a Ready
DPU whose cluster node labels changed (DPF `dpu/state/ready.go` c=d4ef3cdc: "needs to update
label" -> `DPU Cluster Config`)."""

BEFORE_HOLD: Final = frozenset({"", "Initializing", "Pending"})
"""Phases a (re)created DPU passes before DPF holds it in `Node Effect`."""


def current_dpu(state: HostDPFState, dpu_id: str, replaced_uid: str | None = None) -> DPUState | None:
    """The DPU object an operation means now: not deleting, and not the one it replaced."""
    found = state.dpu(dpu_id)
    if found is None or found.deleting or found.phase == PHASE_DELETING or found.uid == replaced_uid:
        return None
    return found


def _current(
    state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]
) -> list[tuple[str, DPUState | None]]:
    return [(d, current_dpu(state, d, replaced.get(d))) for d in dpu_ids]


def held_or_beyond(state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]) -> bool:
    """Every DPU exists (recreated where it was replaced) and has reached the hold, or gone past it
    (a restarted operation finds DPUs a previous run already released)."""
    for _, dpu in _current(state, dpu_ids, replaced):
        if dpu is None or dpu.phase in BEFORE_HOLD:
            return False
        if dpu.phase == PHASE_NODE_EFFECT and not (state.hold is not None and state.hold.holding):
            return False  # DPF has not created the hold yet: releasing now would release nothing
    return True


def any_held(state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]) -> bool:
    """Some DPU waits in `Node Effect` behind a hold that is still on."""
    holding = state.hold is not None and state.hold.holding
    current = _current(state, dpu_ids, replaced)
    return holding and any(d is not None and d.phase == PHASE_NODE_EFFECT for _, d in current)


def release_owed(
    state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str], *, seen_since_release: bool
) -> bool:
    """A hold to release: `any_held`, in a state the last release did not answer already.

    `seen_since_release`: a state was taken since the last release began (True when none was
    made). The state a release answered still shows the hold on: DPF's "false" comes with the
    watch's next change, so releasing again on it only reads the hold to find it released (one
    activity, one GET, issue 37). A hold DPF sets again comes in a newer state, and is released."""
    return seen_since_release and any_held(state, dpu_ids, replaced)


def installing(state: HostDPFState) -> list[str]:
    """Names of the host's DPUs (any, not only the operation's) a power cycle would corrupt."""
    return [d.name for d in state.dpus if d.phase in INSTALL_PHASES]


def shutting_down(state: HostDPFState) -> list[str]:
    """Names of the host's DPUs whose Arm OS is shutting down (`rebootStatus` WaitForShutdown)."""
    return [
        d.name
        for d in state.dpus
        if d.reboot_status is not None and d.reboot_status.phase == "WaitForShutdown"
    ]


def not_stamped(state: HostDPFState) -> list[str]:
    """Names of the host's `Rebooting` DPUs DPF has not yet readied for the reboot (Step 2): by
    `rebootStatus` where the DPU has one, else by its `Rebooted` condition (v26.4.0-rc.3 and
    v25.10, `DPUState.ready_for_host_reboot`)."""
    return [d.name for d in state.dpus if d.phase == PHASE_REBOOTING and not d.ready_for_host_reboot]


def awaits_external_reboot(state: HostDPFState) -> bool:
    """DPF waits for an external reboot of the host that only a reboot and the annotation's removal
    end (DOMAIN.md 2.5): the reboot-required annotation is there, a DPU is `Rebooting`, and every
    `Rebooting` DPU is stamped (Step 2; a removal before it is undone) with no Arm shutting down.
    What an aborted provision or reprovision leaves: a `host reboot` then is the reboot DPF waits
    for, and tells DPF once its cycle is done (`workflows/host_reboot/workflow.py`)."""
    if state.node is None or not state.node.waiting_for_reboot:
        return False
    if not any(d.phase == PHASE_REBOOTING for d in state.dpus):
        return False
    return not not_stamped(state) and not shutting_down(state)


def reboot_barrier_reached(state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]) -> bool:
    """DPF asks for the reboot, every DPU is in `Rebooting` or `Ready`, none of the host installs,
    shuts its Arm down, or waits for DPF's stamp (the module docstring)."""
    if state.node is None or not state.node.waiting_for_reboot or installing(state):
        return False
    if shutting_down(state) or not_stamped(state):
        return False
    current = _current(state, dpu_ids, replaced)
    if any(d is None or d.phase not in (PHASE_REBOOTING, PHASE_READY) for _, d in current):
        return False
    return any(d is not None and d.phase == PHASE_REBOOTING for _, d in current)


ARM_SHUTDOWN_TIMEOUT_SECONDS: Final = 300.0
"""DPF's own bound on a DPU's `WaitForShutdown` (redfish `rebooting.go` `armShutdownWaitTimeout =
5 * time.Minute`, simulators/dpf/BEHAVIOUR.md R2): it releases the gate by then, Arm off or not."""


class Owed(NamedTuple):
    """A step only DPF can take next at the reboot barrier (`dpf_step_owed`)."""

    key: tuple[str, ...]  # what is owed and by which DPUs: another key is another wait
    words: str
    grace: float  # seconds DPF may take by its own rules before its step is overdue


def _reboot_reason(dpu: DPUState) -> str:
    if dpu.reboot_status is not None:
        return f"rebootStatus {dpu.reboot_status.phase or '-'}/{dpu.reboot_status.reason or '-'}"
    rebooted = dpu.condition("Rebooted")
    return f"Rebooted condition {rebooted.reason}" if rebooted is not None else "no Rebooted condition"


def dpf_step_owed(state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]) -> Owed | None:
    """What DPF itself owes the reboot barrier when nothing else holds it: every DPU is in
    `Rebooting` (one at least) or `Ready` and none of the host installs, yet DPF has not asked
    for the reboot, or has not stamped a `Rebooting` DPU (Step 2), or an Arm still shuts down.

    Upstream each of these is DPF's next reconcile, enqueued by any DPU change: Step 1 sets the
    annotation and Step 2 stamps EVERY `Rebooting` DPU of the node (`processExternalReboot`,
    `dpunode_controller.go`, index id 57539131469); a removal before Step 2 is undone (Step 1
    again), so metalflow does not act at the node level on the annotation alone. A DPU that
    waits for the host reboot beside one only `RebootRequested` (issue 36ae) is such a wait:
    the host is not rebooted, and the wait says so (`workflows/host_operation/dpf_owed.py`)."""
    if installing(state):
        return None
    current = _current(state, dpu_ids, replaced)
    if any(d is None or d.phase not in (PHASE_REBOOTING, PHASE_READY) for _, d in current):
        return None
    if not any(d is not None and d.phase == PHASE_REBOOTING for _, d in current):
        return None
    node = state.node.name if state.node is not None else "(none)"
    if state.node is None or not state.node.waiting_for_reboot:
        return Owed(
            ("ask",),
            f"every DPU is in Rebooting or Ready, none installs, yet DPF has not asked for the host "
            f"reboot (no reboot-required annotation on DPUNode {node})",
            0.0,
        )
    rebooting = {d.name: d for d in state.dpus if d.phase == PHASE_REBOOTING}
    shutting = shutting_down(state)
    if shutting:
        return Owed(
            ("shutdown", *shutting),
            f"DPF asked for the host reboot but still holds it for the Arm shutdown of {', '.join(shutting)} "
            f"(rebootStatus WaitForShutdown), past its own {ARM_SHUTDOWN_TIMEOUT_SECONDS:g} s bound",
            ARM_SHUTDOWN_TIMEOUT_SECONDS,
        )
    unstamped = not_stamped(state)
    if not unstamped:
        return None
    which = ", ".join(f"{name} ({_reboot_reason(rebooting[name])})" for name in unstamped)
    return Owed(
        ("stamp", *unstamped),
        f"DPF asked for the host reboot (annotation on DPUNode {node}) but has not readied {which} for "
        "it: its Step 2 sets Pending/WaitingForManualPowerCycleOrReboot on every Rebooting DPU at its "
        "next reconcile and undoes a removal made before, so metalflow does not reboot the host yet",
        0.0,
    )


def all_ready(state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]) -> bool:
    """Every DPU `Ready` (phase and condition) and DPF asks for no reboot."""
    if state.node is not None and state.node.waiting_for_reboot:
        return False
    return all(d is not None and d.ready for _, d in _current(state, dpu_ids, replaced))


def failed(state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]) -> list[DPUState]:
    """The DPUs in `Error`."""
    return [d for _, d in _current(state, dpu_ids, replaced) if d is not None and d.phase == PHASE_ERROR]


def progress_marks(state: HostDPFState, dpu_ids: Iterable[str]) -> tuple[tuple[str, str, str, str], ...]:
    """What changes when DPF moves a DPU on after a reboot: its uid, phase and condition statuses.

    The reboot-required annotation is left out on purpose: the workflow removes it itself, and a
    signal sent just before that removal still carries it.
    """
    marks = []
    for dpu_id in dpu_ids:
        dpu = state.dpu(dpu_id)
        if dpu is None:
            marks.append((dpu_id, "", "", ""))
            continue
        conds = ",".join(f"{c.type}={c.status}/{c.reason}" for c in dpu.conditions)
        marks.append((dpu_id, dpu.uid, dpu.phase, conds))
    return tuple(marks)


def elsewhere(
    state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str], phases: Iterable[str]
) -> list[str]:
    """Where each DPU NOT in one of `phases` is, e.g. "dpu-1 in OS Installing" (an operator's first
    question about a barrier that does not move)."""
    wanted = set(phases)
    return [
        f"{dpu_id} not recreated yet" if dpu is None else f"{dpu_id} in {dpu.phase or 'no phase yet'}"
        for dpu_id, dpu in _current(state, dpu_ids, replaced)
        if dpu is None or dpu.phase not in wanted
    ]


def count(
    state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str], phases: Iterable[str]
) -> int:
    """How many of the DPUs are in one of `phases`."""
    wanted = set(phases)
    return sum(1 for _, d in _current(state, dpu_ids, replaced) if d is not None and d.phase in wanted)


def required_method(state: HostDPFState, dpu_ids: Iterable[str]) -> str | None:
    """The reboot method DPF asks of the host: the DPUNode's aggregate (status or condition
    message), else the priority winner of the DPUs'; None when DPF names none (before v26)."""
    if state.node is not None and state.node.reboot_method:
        return state.node.reboot_method
    methods = [d.reboot_method for d in (state.dpu(i) for i in dpu_ids) if d is not None and d.reboot_method]
    return min(methods, key=method_rank) if methods else None


def host_reset_for(method: str | None) -> str:
    """`warm` or `cold`: the host reset that meets `method` (see `WARM_METHODS`)."""
    return "warm" if method in WARM_METHODS else "cold"


def agent_starts(state: HostDPFState, dpu_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Before a reboot: each `Rebooting` DPU of `dpu_ids` whose agent ran, with its object uid and
    `agentStatus.lastStartupTime` (DPUs without one, before v26 or before their OS was installed,
    are not checked)."""
    starts: dict[str, tuple[str, str]] = {}
    for dpu_id in dpu_ids:
        dpu = state.dpu(dpu_id)
        if dpu is not None and dpu.phase == PHASE_REBOOTING and dpu.agent_started_at and not dpu.deleting:
            starts[dpu_id] = (dpu.uid, dpu.agent_started_at)
    return starts


def not_restarted(state: HostDPFState, starts: Mapping[str, tuple[str, str]]) -> list[str]:
    """The DPUs of `starts` whose agent has not started since (the same object still carries the
    same start time): the reboot did not reach them. DPF's own test of a reboot that took
    (`hasFreshDPUAgentStartup`, `dpu/state/redfish/rebooting.go` c=42ea361e; `dpu_config.go`
    c=62099c8b l.56 waits for it in `DPU Config`). A DPU recreated or deleted, or whose time is
    not known, is not counted; nor one DPF put in `Error` (the run's Error rules decide what
    follows: waiting for its agent would hide the Error until this wait's bound)."""
    stale = []
    for dpu_id, (uid, started) in starts.items():
        dpu = state.dpu(dpu_id)
        if dpu is None or dpu.uid != uid or dpu.deleting or dpu.phase == PHASE_ERROR:
            continue
        if dpu.agent_started_at == started:
            stale.append(dpu_id)
    return stale


def installing_besides(state: HostDPFState, stale: Iterable[str]) -> bool:
    """A DPU of the host installs, other than those of `stale` (waiting in `DPU Config`, which
    counts as installing, for their agent to restart): a reboot now would cut it short."""
    waiting = {d.name for d in (state.dpu(i) for i in stale) if d is not None}
    return any(name not in waiting for name in installing(state))


def went_back(before: str, after: str) -> bool:
    """A DPU moved to an earlier known phase by a move DPF does not make by itself (a reset)."""
    if before not in PHASE_ORDER or after not in PHASE_ORDER or (before, after) in DPF_LOOPS:
        return False
    return PHASE_ORDER.index(after) < PHASE_ORDER.index(before)


def unplanned_change(before: tuple[str, str, str] | None, dpu: DPUState) -> str | None:
    """How a DPU changed since `before` (its uid, phase and agent start time, as last seen) by
    a move DPF does not make by itself: "went back from X to Y", "restarted" (its agent's start
    time moved outside `DPU Config`, where DPF restarts it itself), or None. A recreated DPU (new
    uid) is a new object, not a reset; an unknown start time ("") says nothing."""
    if before is None or before[0] != dpu.uid:
        return None
    _, phase, started = before
    if went_back(phase, dpu.phase):
        return f"went back from {phase} to {dpu.phase}"
    if started and dpu.agent_started_at and dpu.agent_started_at != started and dpu.phase != "DPU Config":
        return "restarted"
    return None
