"""DPF's names (exact, from docs/DOMAIN.md section 2 and the v25.10 CRDs) and small pure helpers."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

Object = dict[str, Any]

PROVISIONING = "provisioning.dpu.nvidia.com"
SVC = "svc.dpu.nvidia.com"
VERSION = "v1alpha1"

# Annotations of the two handshakes.
HOLD_ANNOTATION = "provisioning.dpu.nvidia.com/wait-for-external-nodeeffect"
REBOOT_ANNOTATION = "provisioning.dpu.nvidia.com/dpunode-external-reboot-required"

# Finalizers DPF puts on the objects it protects.
DPU_FINALIZER = "provisioning.dpu.nvidia.com/dpu-protection"
DPUNODE_FINALIZER = "provisioning.dpu.nvidia.com/dpunode-protection"
DPUDEVICE_FINALIZER = "provisioning.dpu.nvidia.com/dpudevice-protection"
MAINTENANCE_FINALIZER = "provisioning.dpu.nvidia.com/dpunodemaintenance-protection"

# Labels DPF puts on the DPUs and DPUNodeMaintenances it creates.
LABEL_DPUNODE = "provisioning.dpu.nvidia.com/dpunode-name"
LABEL_DPUDEVICE = "provisioning.dpu.nvidia.com/dpudevice-name"
LABEL_DPUSET = "provisioning.dpu.nvidia.com/dpuset-name"
LABEL_DPUSET_NAMESPACE = "provisioning.dpu.nvidia.com/dpuset-namespace"
LABEL_OWNED_BY_DEPLOYMENT = "svc.dpu.nvidia.com/owned-by-dpudeployment"

# The label metalflow puts on DPUNodes and DPUDevices to name their DPU group (the simulator's
# own `initialise()` uses it; DPF itself only evaluates whatever selectors the DPUDeployment has).
GROUP_LABEL = "metalflow.io/dpu-group"

# DPU phases (values contain spaces).
INITIALIZING = "Initializing"
PENDING = "Pending"
NODE_EFFECT = "Node Effect"
INITIALIZE_INTERFACE = "Initialize Interface"
CONFIG_FW = "Config FW Parameters"
PREPARE_BFB = "Prepare BFB"
OS_INSTALLING = "OS Installing"
REBOOTING = "Rebooting"
CHECKING_REBOOT = "Checking Host Reboot Required"
CLUSTER_CONFIG = "DPU Cluster Config"
NODE_EFFECT_REMOVAL = "Node Effect Removal"
READY = "Ready"
ERROR = "Error"
DELETING = "Deleting"
# DPF v26 (simulators/dpf/BEHAVIOUR.md): phases the v25.10 enum does not have.
DPU_CONFIG = "DPU Config"
UPDATE_FIRMWARE = "Update Firmware"
HOST_NETWORK = "Host Network Configuration"
SERVICE_READINESS = "Service Readiness"
ARM_FORCE_RESTART = "Perform ARM Force Restart"

# DPF v26 reboot methods, most disruptive first (DPF `GetRebootMethodPriority`, dpunode.md).
REBOOT_METHOD_PRIORITY = (
    "PowerCycle", "SystemLevelReset", "SystemReboot", "FirmwareReset", "DPUWarmReboot", "NoAction", "Unknown",
)  # fmt: skip
# Methods after which the DPU stays in `DPU Config` (the DPU reboots itself; no host reboot).
DPU_ONLY_METHODS = frozenset({"NoAction", "FirmwareReset", "DPUWarmReboot"})
MAX_REBOOT_SEQUENCE_COUNT = 5  # the DPU agent's `maxRebootSequenceCount`
WAITING_FOR_MANUAL = "WaitingForManualPowerCycleOrReboot"

# Phases DPF leaves on its own after `dpu_phase_seconds` (the others wait for someone).
NEXT_PHASE = {
    INITIALIZING: PENDING,
    INITIALIZE_INTERFACE: CONFIG_FW,
    CONFIG_FW: PREPARE_BFB,
    PREPARE_BFB: OS_INSTALLING,
    OS_INSTALLING: REBOOTING,
    CHECKING_REBOOT: REBOOTING,
    CLUSTER_CONFIG: NODE_EFFECT_REMOVAL,
    NODE_EFFECT_REMOVAL: READY,
}
# A host power cycle in these phases corrupts the install unless a reboot was asked for.
INSTALL_PHASES = frozenset({CONFIG_FW, PREPARE_BFB, OS_INSTALLING, UPDATE_FIRMWARE})
# v26: a multi-DPU node's reboot annotation waits while a sibling is in one of these
# (DPF `HandleRebootSync`, docs/DOMAIN.md section 2.5).
REBOOT_SYNC_DEFER = frozenset({PREPARE_BFB, CONFIG_FW, INITIALIZE_INTERFACE, OS_INSTALLING, DPU_CONFIG})

# The v26 happy path (simulators/dpf/BEHAVIOUR.md, rows P1-P3): phases DPF leaves on its own.
NEXT_PHASE_V26 = {
    INITIALIZING: PENDING,
    CONFIG_FW: PREPARE_BFB,
    PREPARE_BFB: OS_INSTALLING,
    OS_INSTALLING: DPU_CONFIG,
    UPDATE_FIRMWARE: PREPARE_BFB,  # a BF4 only, after Config FW Parameters (BEHAVIOUR.md P1)
    HOST_NETWORK: CLUSTER_CONFIG,  # host trusted only: zero trust never enters it (BEHAVIOUR.md P1)
    CLUSTER_CONFIG: SERVICE_READINESS,
    SERVICE_READINESS: NODE_EFFECT_REMOVAL,
    NODE_EFFECT_REMOVAL: READY,
}
# Phases in which the node effect is applied and the DPU is being changed.
UPDATE_PHASES = frozenset(
    {
        INITIALIZE_INTERFACE,
        CONFIG_FW,
        PREPARE_BFB,
        OS_INSTALLING,
        REBOOTING,
        CHECKING_REBOOT,
        CLUSTER_CONFIG,
        NODE_EFFECT_REMOVAL,
    }
)
# The happy path, in order: a condition is true once the DPU is at or past its phase.
HAPPY_PATH = (
    INITIALIZING,
    PENDING,
    NODE_EFFECT,
    INITIALIZE_INTERFACE,
    CONFIG_FW,
    PREPARE_BFB,
    OS_INSTALLING,
    REBOOTING,
    CHECKING_REBOOT,
    CLUSTER_CONFIG,
    NODE_EFFECT_REMOVAL,
    READY,
)
HAPPY_PATH_V26 = (
    INITIALIZING, PENDING, NODE_EFFECT, INITIALIZE_INTERFACE, CONFIG_FW, UPDATE_FIRMWARE, PREPARE_BFB,
    OS_INSTALLING, DPU_CONFIG, REBOOTING, HOST_NETWORK, CLUSTER_CONFIG, SERVICE_READINESS,
    NODE_EFFECT_REMOVAL, READY,
)  # fmt: skip
# DPF v26's deployment modes (`DPFOperatorConfig.spec.deploymentMode`): which phase follows the
# agent's NoAction and a host reboot (BEHAVIOUR.md P1).
ZERO_TRUST = "zero-trust"
HOST_TRUSTED = "host-trusted"
DEPLOYMENT_MODES = (ZERO_TRUST, HOST_TRUSTED)
# (condition type, phase where it appears, phase from which it holds, reason before, reason after)
DPU_CONDITIONS = (
    ("Initialized", INITIALIZING, PENDING, "Initializing", "Initialized"),
    ("BFBReady", PENDING, NODE_EFFECT, "WaitingForBFB", "BFBReady"),
    ("NodeEffectReady", NODE_EFFECT, INITIALIZE_INTERFACE, "NodeEffectInProgress", "NodeEffectReady"),
    ("OSInstalled", INITIALIZE_INTERFACE, REBOOTING, "OSInstalling", "OSInstalled"),
    ("Rebooted", REBOOTING, CLUSTER_CONFIG, "WaitingForManualPowerCycleOrReboot", "Rebooted"),
    ("Ready", INITIALIZING, READY, "NotReady", "Ready"),
)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def dpu_name(node: str, device: str) -> str:
    return f"{node}-{device}"


def host_of_node(node: str) -> str:
    return node.removeprefix("node-")


def dpu_id_of_device(device: str) -> str:
    return device.removeprefix("device-")


def hold_name(node: str) -> str:
    return f"{node}-hold"


def annotations_of(obj: Object) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("annotations") or {})


def labels_of(obj: Object) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("labels") or {})


def deleting(obj: Object) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def phase(obj: Object) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def condition(obj: Object, ctype: str) -> Object | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def is_true(obj: Object, ctype: str) -> bool:
    cond = condition(obj, ctype)
    return cond is not None and cond.get("status") == "True"


def set_condition(
    status: Object, ctype: str, value: bool, reason: str, message: str = "", generation: int | None = None
) -> bool:
    """Set one condition in `status`, keeping lastTransitionTime when the status holds; True if changed."""
    conds: list[Object] = list(status.get("conditions") or [])
    new_status = "True" if value else "False"
    for i, cond in enumerate(conds):
        if cond.get("type") != ctype:
            continue
        if (
            cond.get("status") == new_status
            and cond.get("reason") == reason
            and cond.get("message") == message
        ):
            return False
        updated = {**cond, "status": new_status, "reason": reason, "message": message}
        if cond.get("status") != new_status:
            updated["lastTransitionTime"] = now_rfc3339()
        if generation is not None:
            updated["observedGeneration"] = generation
        conds[i] = updated
        status["conditions"] = conds
        return True
    cond = {"type": ctype, "status": new_status, "reason": reason, "message": message}
    cond["lastTransitionTime"] = now_rfc3339()
    if generation is not None:
        cond["observedGeneration"] = generation
    conds.append(cond)
    status["conditions"] = conds
    return True


def set_dpu_conditions(status: Object, new_phase: str, generation: int | None, *, v26: bool = False) -> None:
    """The DPU conditions that go with a happy-path phase (unknown phases leave them as they are)."""
    path = HAPPY_PATH_V26 if v26 else HAPPY_PATH
    if new_phase not in path:
        return
    at = path.index(new_phase)
    for ctype, appears, first, waiting_reason, done_reason in DPU_CONDITIONS:
        if v26 and ctype == "Rebooted":
            continue  # v26: derived from rebootStatus (simulators/dpf/reboots.py)
        if at < path.index(appears):
            continue  # DPF adds a condition once the DPU reaches the step it describes
        if v26 and ctype == "OSInstalled":
            first = DPU_CONFIG  # the agent runs on the installed OS: installed from DPU Config on
        done = at >= path.index(first)
        if ctype == "Rebooted" and new_phase == CHECKING_REBOOT:
            done = False  # a BF4 asks for another reboot: the last one did not settle it
        set_condition(status, ctype, done, done_reason if done else waiting_reason, "", generation)


def selector_matches(selector: Mapping[str, Any] | None, obj_labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels, matchExpressions) against labels; empty matches all."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if obj_labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in obj_labels
        if op == "In" and not (present and obj_labels[key] in values):
            return False
        if op == "NotIn" and present and obj_labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def map_matches(selector: Mapping[str, str] | None, obj_labels: Mapping[str, str]) -> bool:
    """A plain label map (DPUSet `dpuSelector`) against labels; empty matches all."""
    return all(obj_labels.get(k) == v for k, v in (selector or {}).items())


def contains(actual: Any, wanted: Any) -> bool:
    """Whether `actual` holds everything `wanted` says (extra keys, e.g. defaults, allowed)."""
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(
            k in actual and contains(actual[k], v) for k, v in wanted.items()
        )
    return bool(actual == wanted)
