"""`sim up --initialised`: the site as it is after flows 1-3, every DPU Ready.

Everything is written synchronously (no await), so the controller's watches see only
finished objects and have nothing left to do for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulators.dpf import objects
from simulators.dpf.model import READY, Object, labels_of, map_matches, now_rfc3339, set_dpu_conditions
from simulators.dpf.provisioning import agent_started

if TYPE_CHECKING:
    from simulators.dpf.controller import DPFController


def initialise_site(ctl: DPFController) -> None:
    """Create the site set-up objects and every host's DPUNode, DPUDevices and DPUs, Ready."""
    c = ctl.client
    groups = sorted({h.groups[0] if h.groups else "default" for h in ctl.site.hosts if h.dpus})
    kinds = {
        "BFB": c.bfb,
        "DPUFlavor": c.flavor,
        "DPUServiceTemplate": c.service_template,
        "DPUServiceConfiguration": c.service_configuration,
        "DPUDeployment": c.deployment,
    }
    for body in objects.site_setup_objects(groups):
        c.create(kinds[body["kind"]], body)
    ctl.bfb_ready(objects.DEFAULT_BFB)  # also reconciles the deployments into DPUSets
    for dpuset in c.list(c.dpuset):
        ctl.dpusets[dpuset["metadata"]["name"]] = dpuset
    for host in ctl.site.hosts:
        node = c.create(c.dpunode, objects.dpunode_for(host))
        if node is None:
            continue
        ctl.register_node(node["metadata"]["name"], node["metadata"]["uid"])
        node = c.get(c.dpunode, node["metadata"]["name"])
        assert node is not None
        for dpu in host.dpus:
            per_dpu = ctl.bmc_credentials == objects.PER_DPU_CREDENTIALS
            device = c.create(c.dpudevice, objects.dpudevice_for(host, dpu, per_dpu_credentials=per_dpu))
            if device is None:
                continue
            ctl.node_of_device[device["metadata"]["name"]] = node["metadata"]["name"]
            ctl.register_device(device["metadata"]["name"], device["metadata"]["uid"])
            if per_dpu:
                objects.onboard_bmc(c, device["metadata"]["name"])  # BEHAVIOUR.md Z1
            device = c.get(c.dpudevice, device["metadata"]["name"])
            assert device is not None
            for dpuset in ctl.sets_for(node):
                if map_matches(dpuset["spec"].get("dpuSelector"), labels_of(device)):
                    _create_ready_dpu(ctl, dpuset, node, device)
                    break


def _create_ready_dpu(ctl: DPFController, dpuset: Object, node: Object, device: Object) -> None:
    created = ctl.client.create(ctl.client.dpu, objects.dpu_for(dpuset, node, device))
    if created is None:
        return

    def change(obj: Object) -> bool:
        status = obj.setdefault("status", {})
        generation = obj["metadata"].get("generation")
        bfb = obj["spec"].get("bfb", "")
        status.update(
            {
                "phase": READY,
                "observedGeneration": generation,
                "dpuInstallInterface": "redfish",
                "dpuMode": "dpu",
                "bfbFile": f"/bfb/{ctl.client.namespace}-{bfb}.bfb",
            }
        )
        if ctl.provisioner.deployment_mode:  # v26 (BEHAVIOUR.md Z1)
            status["deploymentMode"] = ctl.provisioner.deployment_mode
        if ctl.provisioner.v26:  # Ready after DPU Config: its agent started and reported (A1, A3, A5)
            status.update(reported_agent(ctl))
        set_dpu_conditions(status, READY, generation)
        return True

    written = ctl.client.mutate(ctl.client.dpu, created["metadata"]["name"], change, status=True)
    if written is not None:
        ctl.provisioner.on_dpu("ADDED", written)


def reported_agent(ctl: DPFController) -> Object:
    """A Ready DPU's agent as a provisioning leaves it (v26): it started in DPU Config (its start
    time, and with device query its `RebootMethodDiscovery=True` mark, A5), reported `NoAction`
    (the sequence ended, its count reset, A1), and DPF copied the start time into
    `agentLastStartupTime` (A3). Before, an initialised DPU had no agent report at all, which
    `metalflow site check` rightly read as "not reported yet": a DPU never provisioned."""
    started = now_rfc3339()
    agent = agent_started({}, started, device_query=not ctl.provisioner.boot_id)
    agent.update({"rebootMethod": "NoAction", "rebootSequenceCount": 0})
    return {"agentStatus": agent, "agentLastStartupTime": started}
