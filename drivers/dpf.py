"""Bodies of the DPF objects metalflow writes (flows 1 and 2 of docs/DOMAIN.md section 2.8), and the
reading of DPF objects into the state models workflows decide on.

Only fields the v1alpha1 CRDs define are written, so a real DPF API server accepts them as
they are (no pruning, no surprise).
"""

from __future__ import annotations

import json
from typing import Any, Final
from urllib.parse import urlsplit

from contracts.errors import InvalidInput
from contracts.models.dpf import (
    BMC_ANNOTATION,
    DPF_VERSION,
    DPU_ID_ANNOTATION,
    DPU_MODEL_ANNOTATION,
    GROUP_LABEL,
    GROUPS_ANNOTATION,
    HOLD_ANNOTATION,
    HOST_ID_LABEL,
    HOST_LABELS_ANNOTATION,
    INSTANCE_ANNOTATION,
    PROVISIONING_GROUP,
    REBOOT_ACK_ANNOTATION,
    REBOOT_METHOD_PRIORITY,
    REBOOT_REQUIRED_ANNOTATION,
    SITE_ANNOTATION,
    SVC_GROUP,
    Condition,
    DPUNodeState,
    DPUState,
    GroupSpec,
    HoldState,
    HostDPFState,
    RebootStatus,
    ServiceSpec,
    SiteSetupInput,
)
from contracts.models.inventory import HostInventory

Object = dict[str, Any]

DEPLOYMENT_NAME_MAX = 20  # CRD rule on DPUDeployment names
DPUNODE_NAME_MAX = 48  # CRD rule on DPUNode names
SERVICE_NAME_MAX = 28


def _obj(group: str, kind: str, name: str, spec: Object, **meta: Any) -> Object:
    return {
        "apiVersion": f"{group}/{DPF_VERSION}",
        "kind": kind,
        "metadata": {"name": name, **meta},
        "spec": spec,
    }


def _service_object_name(group: GroupSpec, service: ServiceSpec) -> str:
    return f"{group.name}-{service.name}"


def site_setup_objects(setup: SiteSetupInput) -> list[Object]:
    """Flow 1: the BFB, the DPUFlavor, and per group its services and its DPUDeployment, which
    holds the node effect (`spec.dpus.nodeEffect.hold`) and selects the group's DPUNodes and
    DPUDevices by `GROUP_LABEL`."""
    bfb_spec: Object = {"url": setup.bfb.url}
    if setup.bfb.file_name:
        bfb_spec["fileName"] = setup.bfb.file_name
    objects = [
        _obj(PROVISIONING_GROUP, "BFB", setup.bfb.name, bfb_spec),
        _obj(PROVISIONING_GROUP, "DPUFlavor", setup.flavor.name, dict(setup.flavor.spec)),
    ]
    for group in setup.groups:
        if len(group.name) > DEPLOYMENT_NAME_MAX:
            raise InvalidInput(
                f"DPU group name {group.name!r} is longer than {DEPLOYMENT_NAME_MAX} characters"
            )
        services: Object = {}
        for service in group.services:
            if len(service.name) > SERVICE_NAME_MAX:
                raise InvalidInput(
                    f"DPU service name {service.name!r} is longer than {SERVICE_NAME_MAX} characters"
                )
            name = _service_object_name(group, service)
            chart: Object = {"source": {"repoURL": service.repo_url, "chart": service.chart,
                                        "version": service.version}}  # fmt: skip
            if service.values:
                chart["values"] = dict(service.values)
            objects.append(
                _obj(
                    SVC_GROUP,
                    "DPUServiceTemplate",
                    name,
                    {
                        "deploymentServiceName": service.name,
                        "helmChart": chart,
                        # Explicit, never left to DPF's default (BEHAVIOUR.md O4): DPF copies
                        # it to the DPUServices it generates, which must carry it (deployInCluster
                        # false); an older DPF prunes the unknown field.
                        "security": {"privileged": service.privileged},
                    },
                )
            )
            objects.append(
                _obj(
                    SVC_GROUP,
                    "DPUServiceConfiguration",
                    name,
                    {
                        "deploymentServiceName": service.name,
                        "upgradePolicy": {"applyNodeEffect": service.apply_node_effect},
                    },
                )  # fmt: skip
            )
            services[service.name] = {"serviceTemplate": name, "serviceConfiguration": name}
        spec = {
            "dpus": {
                "bfb": setup.bfb.name,
                "flavor": setup.flavor.name,
                "nodeEffect": {"hold": True},
                "dpuSetStrategy": {"type": "OnDelete"},
                "dpuSets": [
                    {
                        "nameSuffix": "dpuset",
                        "nodeSelector": {"matchLabels": {GROUP_LABEL: group.name}},
                        "dpuSelector": {GROUP_LABEL: group.name},
                    }
                ],
            },
            "services": services,
        }
        objects.append(_obj(SVC_GROUP, "DPUDeployment", group.name, spec))
    return objects


def _bmc_json(inventory_bmc: Any) -> str:
    return json.dumps(
        inventory_bmc.model_dump(mode="json", exclude_none=True), sort_keys=True, separators=(",", ":")
    )


def node_group(inventory: HostInventory, group: str | None) -> str:
    chosen = group or (inventory.groups[0] if inventory.groups else None)
    if not chosen:
        raise InvalidInput(
            f"host {inventory.host_id} has no DPU group: give one, or list one in the inventory"
        )
    return chosen


def dpunode_body(inventory: HostInventory, group: str) -> Object:
    """Flow 2: the host's DPUNode, rebooted externally (by metalflow), its DPUDevices listed, and
    the host's inventory recorded in metalflow labels and annotations (the cluster inventory)."""
    name = f"node-{inventory.host_id}"
    if len(name) > DPUNODE_NAME_MAX:
        raise InvalidInput(f"DPUNode name {name!r} is longer than {DPUNODE_NAME_MAX} characters")
    annotations = {
        SITE_ANNOTATION: inventory.site,
        BMC_ANNOTATION: _bmc_json(inventory.bmc),
        GROUPS_ANNOTATION: json.dumps(list(inventory.groups or (group,))),
    }
    if inventory.labels:
        annotations[HOST_LABELS_ANNOTATION] = json.dumps(inventory.labels, sort_keys=True)
    if inventory.instance:
        annotations[INSTANCE_ANNOTATION] = inventory.instance
    spec = {
        "nodeRebootMethod": {"external": {}},
        "dpus": [{"name": d.dpu_device_name()} for d in inventory.dpus],
    }
    return _obj(
        PROVISIONING_GROUP, "DPUNode", name, spec,
        labels={GROUP_LABEL: group, HOST_ID_LABEL: inventory.host_id}, annotations=annotations,
    )  # fmt: skip


def dpudevice_bodies(inventory: HostInventory, group: str) -> list[Object]:
    """Flow 2: one DPUDevice per DPU, with the group label the DPUDeployment selects on."""
    bodies = []
    for dpu in inventory.dpus:
        if not dpu.serial:
            raise InvalidInput(
                f"DPU {dpu.id} of host {inventory.host_id} has no serial number; DPF needs one"
            )
        spec: Object = {"serialNumber": dpu.serial}
        annotations = {DPU_ID_ANNOTATION: dpu.id, DPU_MODEL_ANNOTATION: str(dpu.model)}
        if dpu.bmc is not None:
            annotations[BMC_ANNOTATION] = _bmc_json(dpu.bmc)
            host = urlsplit(dpu.bmc.endpoint).hostname
            if host:
                spec["bmcIp"] = host
        bodies.append(
            _obj(
                PROVISIONING_GROUP,
                "DPUDevice",
                dpu.dpu_device_name(),
                spec,
                labels={GROUP_LABEL: group, HOST_ID_LABEL: inventory.host_id},
                annotations=annotations,
            )  # fmt: skip
        )
    return bodies


# Fields metalflow writes that an older DPF does not serve (its API prunes them), at their path
# in `differences`: absent from an object, they say nothing (a DPF before 26.x, or an object
# created before metalflow wrote them, which DPF's rules let stay: BEHAVIOUR.md O4); present
# with another value, they differ.
PRUNED_BY_OLDER_DPF: Final = frozenset({".spec.security"})


def differences(actual: Any, wanted: Any, path: str = "") -> list[str]:
    """Where `actual` does not hold what `wanted` says (extra keys, e.g. defaults, are fine;
    a `PRUNED_BY_OLDER_DPF` field absent from `actual` too)."""
    if isinstance(wanted, dict):
        if not isinstance(actual, dict):
            return [path or "."]
        found: list[str] = []
        for key, value in wanted.items():
            where = f"{path}.{key}"
            if where in PRUNED_BY_OLDER_DPF and key not in actual:
                continue
            found += differences(actual.get(key), value, where)
        return found
    return [] if actual == wanted else [path or "."]


# -- reading state --------------------------------------------------------------------------------


def conditions_of(obj: Object) -> tuple[Condition, ...]:
    return tuple(
        Condition(
            type=str(c.get("type", "")),
            status=str(c.get("status", "")),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
            last_transition=str(c.get("lastTransitionTime") or ""),
        )  # fmt: skip
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _annotations(obj: Object) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def dpu_state(obj: Object) -> DPUState:
    """A DPU as workflows decide on it; the DPF v26 fields only where the server has them."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    status = obj.get("status") or {}
    device = str(spec.get("dpuDeviceName") or "")
    reboot = status.get("rebootStatus")
    agent = status.get("agentStatus") or {}
    count = agent.get("rebootSequenceCount")
    return DPUState(
        name=meta["name"],
        uid=str(meta.get("uid", "")),
        dpu_id=device.removeprefix("device-") if device.startswith("device-") else None,
        phase=str(status.get("phase") or ""),
        conditions=conditions_of(obj),
        deleting=bool(meta.get("deletionTimestamp")),
        bfb=str(spec.get("bfb") or ""),
        previous_phase=str(status.get("previousPhase") or ""),
        reboot_status=None if not isinstance(reboot, dict) else RebootStatus(
            phase=str(reboot.get("phase") or ""), method=str(reboot.get("method") or ""),
            reason=str(reboot.get("reason") or ""), message=str(reboot.get("message") or ""),
        ),
        agent_reboot_method=str(agent["rebootMethod"]) if agent.get("rebootMethod") else None,
        reboot_sequence_count=count if isinstance(count, int) else None,
        # The agent's own start time (it writes it at each start: DPF agent `laststartuptime.go`
        # `Execute`, c=0f647461 l.48-50), not `status.agentLastStartupTime`: the controller copies
        # it there only in `DPU Config` (`dpu_config.go` c=62099c8b l.63), so that one never moves
        # for a reset of a `Ready` DPU. DPF's own fresh-restart test reads this field
        # (`dpu_config.go` l.56, redfish `rebooting.go` `hasFreshDPUAgentStartup`).
        agent_started_at=str(agent.get("lastStartupTime") or ""),
        outdated_reason=str((status.get("outdated") or {}).get("reason") or "") or None,
    )  # fmt: skip


WATCHED_ANNOTATIONS = (REBOOT_REQUIRED_ANNOTATION, HOLD_ANNOTATION, REBOOT_ACK_ANNOTATION)
WATCHED_STATUS = (
    "phase",
    "previousPhase",
    "rebootStatus",
    "outdated",
    "rebootMethod",
)


def watched(obj: Object) -> Object:
    """Only what `host_state` reads of a DPU, DPUNode or DPUNodeMaintenance (a watch's cache):
    `host_state(watched(o))` equals `host_state(o)`. Includes DPF v26's fields and each
    condition's lastTransitionTime (the deadline's start), so a watch that keeps this carries
    what the host operation decides on."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k in WATCHED_ANNOTATIONS}
    labels = {
        k: v for k, v in (meta.get("labels") or {}).items() if k == "provisioning.dpu.nvidia.com/dpunode-name"
    }
    kept_meta = {k: meta[k] for k in ("name", "uid", "resourceVersion", "deletionTimestamp") if k in meta}
    kept_status: Object = {k: status[k] for k in WATCHED_STATUS if k in status}
    agent = status.get("agentStatus") or {}
    if agent:
        kept_status["agentStatus"] = {
            k: agent[k] for k in ("rebootMethod", "rebootSequenceCount", "lastStartupTime") if k in agent
        }
    kept_status["conditions"] = [
        {k: c[k] for k in ("type", "status", "reason", "message", "lastTransitionTime") if k in c}
        for c in status.get("conditions") or []
    ]
    return {
        "metadata": {**kept_meta, "annotations": annotations, "labels": labels},
        "spec": {k: spec[k] for k in ("dpuNodeName", "dpuDeviceName", "bfb") if k in spec},
        "status": kept_status,
    }


def _method_in_message(message: str) -> str | None:
    """The method of `required reboot method: <M> (driven by DPU <name>)` (DPF v26), if any."""
    head = "required reboot method: "
    if not message.startswith(head):
        return None
    method = message[len(head) :].split(" ", 1)[0]
    return method if method in REBOOT_METHOD_PRIORITY else None


def node_state(obj: Object) -> DPUNodeState:
    meta = obj["metadata"]
    conditions = conditions_of(obj)
    method = (obj.get("status") or {}).get("rebootMethod")
    if not method:
        rebooting = next((c for c in conditions if c.type == "DPUNodeRebootInProgress"), None)
        method = _method_in_message(rebooting.message) if rebooting is not None else None
    return DPUNodeState(
        name=meta["name"],
        uid=str(meta.get("uid", "")),
        reboot_required=_annotations(obj).get(REBOOT_REQUIRED_ANNOTATION),
        conditions=conditions,
        deleting=bool(meta.get("deletionTimestamp")),
        reboot_method=str(method) if method else None,
        reboot_acknowledged=_annotations(obj).get(REBOOT_ACK_ANNOTATION),
    )


def hold_state(obj: Object) -> HoldState:
    return HoldState(name=obj["metadata"]["name"], hold=_annotations(obj).get(HOLD_ANNOTATION),
                     conditions=conditions_of(obj))  # fmt: skip


def host_state(host_id: str, node: Object | None, dpus: list[Object], hold: Object | None) -> HostDPFState:
    node_name = f"node-{host_id}"
    mine = [d for d in dpus if (d.get("spec") or {}).get("dpuNodeName") == node_name]
    return HostDPFState(
        host_id=host_id,
        node=node_state(node) if node is not None else None,
        dpus=tuple(sorted((dpu_state(d) for d in mine), key=lambda d: d.name)),
        hold=hold_state(hold) if hold is not None else None,
    )
