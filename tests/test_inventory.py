"""The inventory from both sources: the site file the simulator writes, and the labels and
annotations metalflow's registration puts on the DPF objects of a (simulated) cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from dpf_activities_support import Api, dpf_activities, run, settings_for
from sim_support import RunningSim, running_sim

from activities.inventory import InventoryActivities
from contracts.errors import InvalidInput
from contracts.models.dpf import GroupSpec, RegisterHostInput, SiteSetupInput
from contracts.models.inventory import HostInventory, HostLookup
from drivers.inventory import Inventory


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("inventory") / "sim", hosts=3, dpus_per_host=2) as running:
        yield running


async def test_site_file_source_resolves_bmc_dpus_and_groups(sim: RunningSim) -> None:
    inventory = await Inventory(settings_for(sim)).resolve("host-003")
    written = sim.host("host-003")
    assert inventory.host_id == "host-003" and inventory.site == sim.site["name"]
    assert inventory.bmc.bmc_id == "host-003"
    assert inventory.bmc.endpoint == written["bmc"]["endpoint"]
    assert inventory.bmc.credentials.file == written["bmc"]["credentials"]["file"]
    assert [(d.id, d.model, d.serial) for d in inventory.dpus] == [
        ("host-003-dpu-0", "BF4", "MT000300"),
        ("host-003-dpu-1", "BF4", "MT000301"),
    ]
    assert inventory.dpus[0].bmc is not None and inventory.dpus[0].bmc.bmc_id == "host-003-dpu-0"
    assert inventory.groups == ("gpu-compute",) and inventory.labels == {"rack": "r01"}
    assert inventory.instance is None and inventory.namespace == "dpf-operator-system"


async def test_site_file_unknown_host_and_bad_file_are_invalid_input(sim: RunningSim, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=f"unknown host 'host-404': not in the site file {sim.site_file}"):
        await Inventory(settings_for(sim)).resolve("host-404")
    broken = tmp_path / "site.yaml"
    broken.write_text("hosts: [{id: h1}]\n")  # no BMC
    with pytest.raises(InvalidInput, match=f"the site file {broken} is not valid"):
        await Inventory(settings_for(sim, site_file=broken)).resolve("h1")
    with pytest.raises(InvalidInput, match="cannot read the site file"):
        await Inventory(settings_for(sim, site_file=tmp_path / "absent.yaml")).resolve("h1")


async def test_site_file_with_instance_and_env_credentials(sim: RunningSim, tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(
        yaml.safe_dump(
            {
                "name": "lab",
                "namespace": "dpf-lab",
                "hosts": [
                    {
                        "id": "gpu-7",
                        "instance": "inst-42",
                        "groups": ["storage"],
                        "bmc": {
                            "endpoint": "https://10.0.0.7",
                            "profile": "powercycle",
                            "credentials": {"env": {"username": "BMC_USER", "password": "BMC_PASS"}},
                            "ca_bundle": "/etc/bmc-ca.pem",
                        },
                        "dpus": [{"id": "gpu-7-bf", "model": "BF3", "serial": "MT1"}],
                    }
                ],
            }
        )
    )
    inventory = await Inventory(settings_for(sim, site_file=site)).resolve("gpu-7")
    assert inventory.instance == "inst-42" and inventory.namespace == "dpf-lab" and inventory.site == "lab"
    assert inventory.bmc.credentials.env is not None and inventory.bmc.credentials.env.username == "BMC_USER"
    assert inventory.bmc.ca_bundle == "/etc/bmc-ca.pem"
    assert inventory.dpus[0].bmc is None


async def test_cluster_source_reads_back_what_registration_wrote(sim: RunningSim) -> None:
    acts = dpf_activities(sim)
    from_site = await Inventory(settings_for(sim)).resolve("host-002")
    await run(acts.create_site_objects, SiteSetupInput(groups=(GroupSpec(name="gpu-compute"),)))
    await run(acts.register_host_dpus, RegisterHostInput(inventory=from_site))

    cluster = Inventory(settings_for(sim, inventory="cluster"))
    from_cluster = await cluster.resolve("host-002")
    assert from_cluster == from_site

    api = Api(sim)
    api.patch("DPUNode", "node-host-002", {"metadata": {"annotations": {"metalflow.io/instance": "inst-9"}}})
    assigned = await run(InventoryActivities(cluster).resolve_host_inventory, HostLookup(host_id="host-002"))
    assert isinstance(assigned, HostInventory) and assigned.instance == "inst-9"
    # The site file still says no instance; asking that source explicitly says so.
    assert (await cluster.resolve("host-002", "site")).instance is None

    # A changed inventory re-registered: the node's annotation follows, nothing else is rewritten.
    reassigned = from_site.model_copy(update={"instance": "inst-10"})
    result = await run(acts.register_host_dpus, RegisterHostInput(inventory=reassigned))
    assert [(o.kind, o.outcome) for o in result.objects] == [
        ("DPUDevice", "unchanged"),
        ("DPUDevice", "unchanged"),
        ("DPUNode", "updated"),
    ]
    assert (await cluster.resolve("host-002")).instance == "inst-10"
    api.close()


async def test_cluster_source_unknown_host_names_the_cluster(sim: RunningSim) -> None:
    cluster = Inventory(settings_for(sim, inventory="cluster"))
    with pytest.raises(
        InvalidInput,
        match="unknown host 'host-404': no DPUNode node-host-404 in namespace dpf-operator-system",
    ):
        await cluster.resolve("host-404")


async def test_cluster_source_refuses_a_node_metalflow_did_not_register(tmp_path: Path) -> None:
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=1, initialised=True) as sim:
        cluster = Inventory(settings_for(sim, inventory="cluster"))
        with pytest.raises(InvalidInput, match="has no valid JSON annotation metalflow.io/bmc"):
            await cluster.resolve("host-001")
