"""Bodies of the DPF objects: those DPF derives (DPUSet, DPU, DPUNodeMaintenance) and those
metalflow creates in flows 1 and 2 (used by `DPFController.initialise()` and as the reference
shapes for the product's own activities)."""

from __future__ import annotations

from typing import Any

from simulators.dpf.model import (
    DPU_FINALIZER,
    GROUP_LABEL,
    HOLD_ANNOTATION,
    LABEL_DPUDEVICE,
    LABEL_DPUNODE,
    LABEL_DPUSET,
    LABEL_DPUSET_NAMESPACE,
    LABEL_OWNED_BY_DEPLOYMENT,
    MAINTENANCE_FINALIZER,
    PROVISIONING,
    SVC,
    VERSION,
    Object,
    dpu_name,
    hold_name,
)
from simulators.site import DPU, Host

DEFAULT_BFB = "bf-bundle-2-9-0"
DEFAULT_BFB_URL = "http://bfb.local/bf-bundle-2.9.0-90_24.10_ubuntu-22.04_prod.bfb"
DEFAULT_FLAVOR = "carbide-dpu-flavor"
SERVICE = "dts"  # one DPU service per group: telemetry


def dpuset_for(deployment: Object, entry: Object) -> Object:
    """The DPUSet a DPUDeployment's `spec.dpus.dpuSets[]` entry asks for."""
    meta = deployment["metadata"]
    dpus = deployment["spec"]["dpus"]
    template_spec: Object = {"dpuFlavor": dpus["flavor"], "bfb": {"name": dpus["bfb"]}}
    if dpus.get("nodeEffect"):
        template_spec["nodeEffect"] = dpus["nodeEffect"]
    template: Object = {"spec": template_spec}
    if entry.get("dpuAnnotations"):
        template["annotations"] = entry["dpuAnnotations"]
    spec: Object = {
        "dpuTemplate": template,
        "strategy": dpus.get("dpuSetStrategy") or {"type": "OnDelete"},
    }
    if entry.get("nodeSelector"):
        spec["dpuNodeSelector"] = entry["nodeSelector"]
    if entry.get("dpuSelector"):
        spec["dpuSelector"] = entry["dpuSelector"]
    return {
        "apiVersion": f"{PROVISIONING}/{VERSION}",
        "kind": "DPUSet",
        "metadata": {
            "name": f"{meta['name']}-{entry['nameSuffix']}",
            "labels": {LABEL_OWNED_BY_DEPLOYMENT: f"{meta['namespace']}_{meta['name']}"},
            "ownerReferences": [_owner(deployment, f"{SVC}/{VERSION}", "DPUDeployment")],
        },
        "spec": spec,
    }


def dpu_for(dpuset: Object, node: Object, device: Object) -> Object:
    """The DPU a DPUSet creates for one DPUDevice of one DPUNode."""
    template = dpuset["spec"]["dpuTemplate"]
    tspec = template["spec"]
    node_name, device_name = node["metadata"]["name"], device["metadata"]["name"]
    meta: Object = {
        "name": dpu_name(node_name, device_name),
        "labels": {
            LABEL_DPUNODE: node_name,
            LABEL_DPUDEVICE: device_name,
            LABEL_DPUSET: dpuset["metadata"]["name"],
            LABEL_DPUSET_NAMESPACE: dpuset["metadata"]["namespace"],
        },
        "finalizers": [DPU_FINALIZER],
        "ownerReferences": [_owner(dpuset, f"{PROVISIONING}/{VERSION}", "DPUSet")],
    }
    if template.get("annotations"):
        meta["annotations"] = dict(template["annotations"])
    spec: Object = {
        "dpuNodeName": node_name,
        "dpuDeviceName": device_name,
        "bfb": (tspec.get("bfb") or {}).get("name", ""),
        "dpuFlavor": tspec["dpuFlavor"],
        "serialNumber": device["spec"]["serialNumber"],
        "nodeEffect": tspec.get("nodeEffect") or {"drain": True},
    }
    if device["spec"].get("bmcIp"):
        spec["bmcIP"] = device["spec"]["bmcIp"]
    return {"apiVersion": f"{PROVISIONING}/{VERSION}", "kind": "DPU", "metadata": meta, "spec": spec}


def hold_maintenance(node: str, requestor: str) -> Object:
    """The `<dpunode>-hold` DPUNodeMaintenance, holding until metalflow says "false"."""
    return {
        "apiVersion": f"{PROVISIONING}/{VERSION}",
        "kind": "DPUNodeMaintenance",
        "metadata": {
            "name": hold_name(node),
            "labels": {LABEL_DPUNODE: node},
            "annotations": {HOLD_ANNOTATION: "true"},
            "finalizers": [MAINTENANCE_FINALIZER],
        },
        "spec": {"dpuNodeName": node, "nodeEffect": {"hold": True}, "requestor": [requestor]},
    }


def _owner(obj: Object, api_version: str, kind: str) -> Object:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


# -- what metalflow creates (flows 1 and 2) ------------------------------------------------------


def site_setup_objects(groups: list[str]) -> list[Object]:
    """Flow 1: one BFB and DPUFlavor, and per DPU group a service template, configuration and
    DPUDeployment (holding the node effect) selecting the group's DPUNodes and DPUDevices."""
    objects: list[Object] = [
        {
            "apiVersion": f"{PROVISIONING}/{VERSION}",
            "kind": "BFB",
            "metadata": {"name": DEFAULT_BFB},
            "spec": {"url": DEFAULT_BFB_URL, "fileName": f"{DEFAULT_BFB}.bfb"},
        },
        {
            "apiVersion": f"{PROVISIONING}/{VERSION}",
            "kind": "DPUFlavor",
            "metadata": {"name": DEFAULT_FLAVOR},
            "spec": {"dpuMode": "dpu", "grub": {"kernelParameters": ["console=hvc0"]}},
        },
    ]
    for group in groups:
        objects += [
            {
                "apiVersion": f"{SVC}/{VERSION}",
                "kind": "DPUServiceTemplate",
                "metadata": {"name": f"{group}-{SERVICE}"},
                "spec": {
                    "deploymentServiceName": SERVICE,
                    "security": {"privileged": False},  # as drivers/dpf.py writes it (BEHAVIOUR.md O4)
                    "helmChart": {
                        "source": {
                            "repoURL": "oci://nvcr.io/nvidia/doca",
                            "chart": "doca-telemetry",
                            "version": "1.0.0",
                        }
                    },
                },
            },
            {
                "apiVersion": f"{SVC}/{VERSION}",
                "kind": "DPUServiceConfiguration",
                "metadata": {"name": f"{group}-{SERVICE}"},
                "spec": {"deploymentServiceName": SERVICE, "upgradePolicy": {"applyNodeEffect": False}},
            },
            deployment_for(group),
        ]
    return objects


def deployment_for(group: str, bfb: str = DEFAULT_BFB) -> Object:
    """The DPUDeployment of one DPU group (its name is the group's: at most 20 characters)."""
    return {
        "apiVersion": f"{SVC}/{VERSION}",
        "kind": "DPUDeployment",
        "metadata": {"name": group},
        "spec": {
            "dpus": {
                "bfb": bfb,
                "flavor": DEFAULT_FLAVOR,
                "nodeEffect": {"hold": True},
                "dpuSetStrategy": {"type": "OnDelete"},
                "dpuSets": [
                    {
                        "nameSuffix": "dpuset",
                        "nodeSelector": {"matchLabels": {GROUP_LABEL: group}},
                        "dpuSelector": {GROUP_LABEL: group},
                    }
                ],
            },
            "services": {
                SERVICE: {
                    "serviceTemplate": f"{group}-{SERVICE}",
                    "serviceConfiguration": f"{group}-{SERVICE}",
                }
            },
        },
    }


def dpunode_for(host: Host) -> Object:
    """Flow 2: the DPUNode of a host, its DPUs listed, rebooted externally (by metalflow)."""
    group = host.groups[0] if host.groups else "default"
    return {
        "apiVersion": f"{PROVISIONING}/{VERSION}",
        "kind": "DPUNode",
        "metadata": {"name": f"node-{host.id}", "labels": {GROUP_LABEL: group}},
        "spec": {
            "nodeRebootMethod": {"external": {}},
            "dpus": [{"name": f"device-{dpu.id}"} for dpu in host.dpus],
        },
    }


PER_DPU_CREDENTIALS = "per-dpu"
CREDENTIAL_MODES = ("ours", PER_DPU_CREDENTIALS)


def credential_secret(device: str) -> str:
    """The per-DPU BMC credential Secret DPF 26.8 uses for `device` (a name of ours; upstream's
    example is `<dpu>-bmc-v1`, per-dpu-bmc-credentials.md)."""
    return f"{device}-bmc-v1"


def dpudevice_for(host: Host, dpu: DPU, *, per_dpu_credentials: bool = False) -> Object:
    """Flow 2: the DPUDevice of one DPU of a host; with `per_dpu_credentials` it names its own
    BMC credential Secret (`spec.bmcCredentialSecretName`, DPF 26.8; BEHAVIOUR.md Z1)."""
    group = host.groups[0] if host.groups else "default"
    spec: dict[str, Any] = {"serialNumber": dpu.serial or dpu.id}
    if per_dpu_credentials:
        spec["bmcCredentialSecretName"] = credential_secret(f"device-{dpu.id}")
    address = _bmc_address(dpu.bmc.endpoint) if dpu.bmc is not None else ""
    if address:
        spec["bmcIp"] = address
    return {
        "apiVersion": f"{PROVISIONING}/{VERSION}",
        "kind": "DPUDevice",
        "metadata": {"name": f"device-{dpu.id}", "labels": {GROUP_LABEL: group}},
        "spec": spec,
    }


def _bmc_address(endpoint: str) -> str:
    """The host part of a BMC endpoint (DPUDevice `bmcIp`), or "" before the site is served."""
    rest = endpoint.split("://", 1)[-1]
    return rest.split("/", 1)[0].rsplit(":", 1)[0] if rest else ""


def onboard_bmc(client: Any, device: str) -> None:
    """What DPF 26.8's zero-trust onboarding leaves on a DPUDevice whose BMC it reset (BEHAVIOUR.md
    Z1): `BMCFactoryResetReady` True `FactoryResetCompleted`, `status.bmcFactoryResetRequestTime`,
    the credential in use (`status.bmcCredentialSecretName`) and `BMCCredentialsReady` True
    `CredentialsValid` (bmc-factory-reset.md, per-dpu-bmc-credentials.md). The BMC's own password
    is changed by the site (simulators/app.py), as DPF sets it from its Secret."""
    from datetime import UTC, datetime

    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def change(obj: Object) -> bool:
        status = obj.setdefault("status", {})
        status["bmcFactoryResetRequestTime"] = now
        status["bmcCredentialSecretName"] = obj["spec"].get("bmcCredentialSecretName", "bmc-shared-password")
        conditions = [c for c in status.get("conditions") or [] if c.get("type") not in _ONBOARDING]
        for kind, reason in (
            ("BMCFactoryResetReady", "FactoryResetCompleted"),
            ("BMCCredentialsReady", "CredentialsValid"),
        ):
            conditions.append({"type": kind, "status": "True", "reason": reason, "message": "",
                               "lastTransitionTime": now})  # fmt: skip
        status["conditions"] = conditions
        return True

    client.mutate(client.dpudevice, device, change, status=True)


_ONBOARDING = ("BMCFactoryResetReady", "BMCCredentialsReady")
