"""The host entity shows the host's versions (issue 26 item 8): after an operation ends it reads
them once (`read_host_versions_brief`) and writes them to its memo entry `versions` (the entity's
page in the Temporal UI) and every BFB to the `BfbVersion` search attribute.

End to end against the simulated site (a real worker, the CLI's entry point `send_update`); the
memo's shape and bounds without a server (`workflows/host/versions.py` is pure)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import METALFLOW
from host_operation_support import FAST_POLICY, eventually
from ports_support import free_port
from sim_support import RunningSim, prefixed_sim
from takeover_support import takeover_seconds
from temporalio.client import Client, WorkflowExecutionStatus

from activities.redfish import build_redfish_client
from contracts import names
from contracts.models.host import (
    REQUEST_REBOOT_UPDATE,
    REQUEST_REPROVISION_UPDATE,
    HostWorkflowInput,
    OperationAccepted,
    OperationRequest,
)
from contracts.models.inventory import DPUVersions, HostVersions, HostVersionsBrief, VersionTargets
from drivers.inventory import Inventory
from drivers.kube import Kube
from drivers.settings import Settings
from drivers.versions import VersionReader
from metalflow.hosts import host_status, send_update
from metalflow.runtime.worker import build_worker
from simulators.dpf.objects import DEFAULT_BFB
from simulators.redfish.host import PROFILES
from workflows.host import versions as host_versions

OFF_TARGET_FIRMWARE = "99.99.9999"


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[RunningSim, str]]:
    """Two hosts with ids no other test's entity uses (entities outlive their tests' workers)."""
    prefix = f"ver{uuid.uuid4().hex[:6]}"
    with prefixed_sim(tmp_path, prefix, hosts=2) as sim:
        yield sim, prefix


def _worker_site(sim: RunningSim, path: Path, *, dead_dpu_bmc: str | None = None) -> Path:
    """The simulated site's file as the worker reads it, with the site's targets (the BFB it runs,
    a DPU firmware none runs) and, for `dead_dpu_bmc`, that DPU's BMC at a port nobody listens on."""
    site: dict[str, Any] = yaml.safe_load(sim.site_file.read_text())
    site["versions"] = {"targets": {"bfb": DEFAULT_BFB, "dpu_firmware": OFF_TARGET_FIRMWARE}}
    if dead_dpu_bmc is not None:
        port = free_port()  # of the test's own block: no server of the suite binds it
        for host in site["hosts"]:
            for dpu in host["dpus"]:
                if dpu["id"] == dead_dpu_bmc:
                    dpu["bmc"]["endpoint"] = f"http://127.0.0.1:{port}"
    path.write_text(yaml.safe_dump(site))
    return path


async def _simulator_reports(sim: RunningSim, host: str) -> HostVersions:
    """What the simulated site reports, read with the product's drivers (no workflow)."""
    settings = Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig)
    kube = Kube(settings)
    redfish = build_redfish_client(settings)
    try:
        reader = VersionReader(kube, redfish)
        return await reader.host(await Inventory(settings, kube).resolve(host), identity=False)
    finally:
        await redfish.aclose()
        kube.close()


async def _memo_after(client: Client, host: str, after: str) -> dict[str, Any]:
    handle = client.get_workflow_handle(names.host_workflow_id(host))
    found: dict[str, Any] = {}

    async def shown() -> bool:
        memo = await (await handle.describe()).memo()
        found.update(memo.get(host_versions.MEMO_KEY) or {})
        return found.get("after") == after

    await eventually(shown, timeout=60, what=f"the entity of {host} to show its versions after {after}")
    return found


async def test_after_a_reprovision_the_entity_memo_shows_the_versions_the_site_reports(
    client: Client, task_queue: str, site: tuple[RunningSim, str], tmp_path: Path
) -> None:
    sim, prefix = site
    host = f"{prefix}-001"
    settings = Settings(
        site_file=_worker_site(sim, tmp_path / "worker-site.yaml"),
        kubeconfig=sim.kubeconfig,
        worker_takeover_seconds=takeover_seconds(),
    )
    async with build_worker(client, task_queue, settings):
        accepted = await send_update(
            client, HostWorkflowInput(host_id=host, policy=FAST_POLICY), REQUEST_REPROVISION_UPDATE,
            OperationRequest(requested_by="alice", reason="versions"), OperationAccepted, task_queue,
        )  # fmt: skip
        memo = await _memo_after(client, host, f"{accepted.workflow_id} completed")
        described = await client.get_workflow_handle(names.host_workflow_id(host)).describe()
        status = await host_status(client, host)
    reported = await _simulator_reports(sim, host)
    assert [(r.operation, r.outcome) for r in status.recent] == [("reprovision", "completed")]
    assert set(memo["dpus"]) == {d.dpu_id for d in reported.dpus} == {f"{host}-dpu-0", f"{host}-dpu-1"}
    for dpu in reported.dpus:
        assert dpu.bfb == DEFAULT_BFB and dpu.dpu_firmware and dpu.dpu_bmc_firmware and dpu.flavor
        assert memo["dpus"][dpu.dpu_id] == {
            "bfb": f"{dpu.bfb} (at target)",
            "flavor": dpu.flavor,
            "dpu_firmware": f"{dpu.dpu_firmware} (target {OFF_TARGET_FIRMWARE})",
            "dpu_bmc_firmware": dpu.dpu_bmc_firmware,
        }
    assert memo["at_target"] == f"no: dpu_firmware on {host}-dpu-0, dpu_firmware on {host}-dpu-1"
    # The host's BMC (profile powercycle: Dell iDRAC) serves its FirmwareInventory: the UI shows it.
    assert reported.host_bmc_firmware == PROFILES["powercycle"].firmware[0].version
    assert memo["host_bmc_firmware"] == reported.host_bmc_firmware
    assert described.typed_search_attributes.get(names.BFB_VERSION) == [DEFAULT_BFB]
    listed = [
        w.id async for w in client.list_workflows(f'BfbVersion = "{DEFAULT_BFB}" AND HostId = "{host}"')
    ]
    assert names.host_workflow_id(host) in listed


async def test_a_dpu_bmc_that_cannot_be_read_shows_unknown_and_the_entity_goes_on(
    client: Client, task_queue: str, site: tuple[RunningSim, str], tmp_path: Path
) -> None:
    sim, prefix = site
    host = f"{prefix}-002"
    dead = f"{host}-dpu-1"
    worker_site = _worker_site(sim, tmp_path / "worker-site.yaml", dead_dpu_bmc=dead)
    settings = Settings(
        site_file=worker_site, kubeconfig=sim.kubeconfig, worker_takeover_seconds=takeover_seconds()
    )
    async with build_worker(client, task_queue, settings):
        accepted = await send_update(
            client, HostWorkflowInput(host_id=host, policy=FAST_POLICY), REQUEST_REBOOT_UPDATE,
            OperationRequest(requested_by="alice", reason="versions", policy=FAST_POLICY), OperationAccepted,
            task_queue,
        )  # fmt: skip
        memo = await _memo_after(client, host, f"{accepted.workflow_id} completed")
        described = await client.get_workflow_handle(names.host_workflow_id(host)).describe()
        status = await host_status(client, host)
    assert described.status == WorkflowExecutionStatus.RUNNING
    assert [(r.operation, r.outcome) for r in status.recent] == [("reboot", "completed")]
    readable, unread = memo["dpus"][f"{host}-dpu-0"], memo["dpus"][dead]
    assert readable["dpu_firmware"].endswith(f"(target {OFF_TARGET_FIRMWARE})")
    assert not readable["dpu_firmware"].startswith("unknown")
    for field in ("dpu_firmware", "dpu_bmc_firmware"):
        assert unread[field].startswith("unknown (BMC: "), unread
        assert "cannot reach" in unread[field], unread
    assert unread["bfb"] == f"{DEFAULT_BFB} (at target)"  # DPF still answers for it
    assert memo["at_target"].startswith(f"no: dpu_firmware on {host}-dpu-0, dpu_firmware on {dead} unknown")


# -- what a versions read asks of the BMCs: only what can have changed (issue 37 item 1) -------------

FIRMWARE_INVENTORY = "/redfish/v1/UpdateService"  # where every FirmwareInventory read goes


def _since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


def _inventory_reads(requests: dict[str, int]) -> int:
    return sum(n for k, n in requests.items() if k.split(" ", 1)[1].startswith(FIRMWARE_INVENTORY))


async def _versions_reads(client: Client, host: str) -> int:
    """The `read_host_versions_brief` activities the host's entity scheduled so far."""
    handle = client.get_workflow_handle(names.host_workflow_id(host))
    found = 0
    async for event in handle.fetch_history_events():
        scheduled = event.activity_task_scheduled_event_attributes
        if event.HasField("activity_task_scheduled_event_attributes"):
            found += scheduled.activity_type.name == "read_host_versions_brief"
    return found


async def _operation_ended(client: Client, host: str, operations: int) -> None:
    """Until the entity recorded `operations` ended operations and runs no activity (a versions
    read it started after the last one has ended too)."""
    handle = client.get_workflow_handle(names.host_workflow_id(host))

    async def idle() -> bool:
        status = await host_status(client, host)
        described = await handle.describe()
        return len(status.recent) == operations and not described.raw_description.pending_activities

    await eventually(idle, timeout=60, what=f"{operations} operations of {host} to end")


def _bmcs(sim: RunningSim, host: str) -> dict[str, dict[str, int]]:
    """Every request each BMC of the host answered so far: its own and its DPUs'."""
    return {bmc: sim.bmc_requests(bmc) for bmc in (host, f"{host}-dpu-0", f"{host}-dpu-1")}


async def test_a_reboot_reads_no_versions_the_entity_already_knows(
    client: Client, task_queue: str, site: tuple[RunningSim, str], tmp_path: Path
) -> None:
    sim, prefix = site
    host = f"{prefix}-001"
    settings = Settings(
        site_file=_worker_site(sim, tmp_path / "worker-site.yaml"),
        kubeconfig=sim.kubeconfig,
        worker_takeover_seconds=takeover_seconds(),
    )
    entity = HostWorkflowInput(host_id=host, policy=FAST_POLICY)
    reboot = OperationRequest(requested_by="alice", reason="versions", policy=FAST_POLICY)
    async with build_worker(client, task_queue, settings):
        first = await send_update(
            client, entity, REQUEST_REBOOT_UPDATE, reboot, OperationAccepted, task_queue
        )
        known = await _memo_after(client, host, f"{first.workflow_id} completed")  # a new entity: all once
        await _operation_ended(client, host, 1)
        before, reads = _bmcs(sim, host), await _versions_reads(client, host)
        await send_update(client, entity, REQUEST_REBOOT_UPDATE, reboot, OperationAccepted, task_queue)
        await _operation_ended(client, host, 2)
        spent = {bmc: _since(before[bmc], now) for bmc, now in _bmcs(sim, host).items()}
        assert await _versions_reads(client, host) == reads  # no versions read after a reboot
        memo = await _memo_after(client, host, f"{first.workflow_id} completed")
    # The DPUs' BMCs saw nothing; the host's BMC only the power cycle's own requests.
    assert spent[f"{host}-dpu-0"] == spent[f"{host}-dpu-1"] == {}
    assert _inventory_reads(spent[host]) == 0 and spent[host], spent[host]
    assert memo == known  # what the entity knew stays shown


async def test_a_reprovision_reads_dpf_only_and_shows_the_firmware_as_read_before_it(
    client: Client, task_queue: str, site: tuple[RunningSim, str], tmp_path: Path
) -> None:
    sim, prefix = site
    host = f"{prefix}-002"
    settings = Settings(
        site_file=_worker_site(sim, tmp_path / "worker-site.yaml"),
        kubeconfig=sim.kubeconfig,
        worker_takeover_seconds=takeover_seconds(),
    )
    entity = HostWorkflowInput(host_id=host, policy=FAST_POLICY)
    reboot = OperationRequest(requested_by="alice", reason="versions", policy=FAST_POLICY)
    async with build_worker(client, task_queue, settings):
        first = await send_update(
            client, entity, REQUEST_REBOOT_UPDATE, reboot, OperationAccepted, task_queue
        )
        known = await _memo_after(client, host, f"{first.workflow_id} completed")
        await _operation_ended(client, host, 1)
        before = _bmcs(sim, host)
        accepted = await send_update(
            client, entity, REQUEST_REPROVISION_UPDATE, OperationRequest(requested_by="bob"),
            OperationAccepted, task_queue,
        )  # fmt: skip
        memo = await _memo_after(client, host, f"{accepted.workflow_id} completed")
        await _operation_ended(client, host, 2)
        spent = {bmc: _since(before[bmc], now) for bmc, now in _bmcs(sim, host).items()}
    for dpu in (f"{host}-dpu-0", f"{host}-dpu-1"):
        # DPF only: no session, no FirmwareInventory on the DPU BMCs (issue 37 Deliver 1).
        assert _inventory_reads(spent[dpu]) == 0 and spent[dpu] == {}, spent[dpu]
        shown, was = memo["dpus"][dpu], known["dpus"][dpu]
        assert (shown["bfb"], shown["flavor"]) == (was["bfb"], was["flavor"])  # DPF's, read now
        for field in ("dpu_firmware", "dpu_bmc_firmware"):  # what was read before, never as current
            value = was[field].split(" (")[0]
            assert shown[field].startswith(f"{value} (read "), shown[field]
            assert shown[field].endswith(
                f", before {accepted.workflow_id}; a BFB can carry NIC firmware: --refresh reads it)"
            ), shown[field]
    assert _inventory_reads(spent[host]) == 0, spent[host]  # no BFB carries the host BMC's
    assert memo["host_bmc_firmware"] == known["host_bmc_firmware"] != "unknown"  # still known


async def _metalflow(client: Client, sim: RunningSim, site_file: Path, *args: str) -> tuple[int, str, str]:
    """`metalflow ARGS` as a process, against `client`'s Temporal and the simulated site."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "METALFLOW_", "OTEL_"))}
    env |= {"TEMPORAL_ADDRESS": client.service_client.config.target_host,
            "TEMPORAL_NAMESPACE": client.namespace, "TEMPORAL_CONFIG_FILE": os.devnull,
            "METALFLOW_SITE_FILE": str(site_file), "KUBECONFIG": str(sim.kubeconfig),
            "METALFLOW_INVENTORY": "site"}  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        METALFLOW, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    return process.returncode or 0, out.decode(), err.decode()


async def test_host_versions_refresh_gives_the_entity_what_it_read_and_no_bmc_is_asked_twice(
    client: Client, task_queue: str, site: tuple[RunningSim, str], tmp_path: Path
) -> None:
    sim, prefix = site
    host, stranger = f"{prefix}-001", f"{prefix}-002"
    worker_site = _worker_site(sim, tmp_path / "worker-site.yaml")
    settings = Settings(
        site_file=worker_site, kubeconfig=sim.kubeconfig, worker_takeover_seconds=takeover_seconds()
    )
    entity = HostWorkflowInput(host_id=host, policy=FAST_POLICY)
    reboot = OperationRequest(requested_by="alice", reason="versions", policy=FAST_POLICY)
    at_start = _bmcs(sim, host)
    async with build_worker(client, task_queue, settings):
        first = await send_update(
            client, entity, REQUEST_REBOOT_UPDATE, reboot, OperationAccepted, task_queue
        )
        known = await _memo_after(client, host, f"{first.workflow_id} completed")
        await _operation_ended(client, host, 1)
        one_read = {
            bmc: _inventory_reads(_since(at_start[bmc], now)) for bmc, now in _bmcs(sim, host).items()
        }
        before, reads = _bmcs(sim, host), await _versions_reads(client, host)
        status, out, err = await _metalflow(
            client, sim, worker_site, "host", "versions", host, stranger, "--refresh", "--by", "carol"
        )
        assert status == 0, out + err
        memo = await _memo_after(client, host, "host versions --refresh by carol")
        assert await _versions_reads(client, host) == reads  # the entity asked no BMC itself
        spent = {bmc: _inventory_reads(_since(before[bmc], now)) for bmc, now in _bmcs(sim, host).items()}
    assert f"{stranger}: no entity yet" in err  # a host never asked anything: said, not an error
    assert spent == one_read and all(one_read.values()), (spent, one_read)  # the command's read only
    assert memo["dpus"] == known["dpus"] and memo["host_bmc_firmware"] == known["host_bmc_firmware"]
    assert memo["at_target"] == known["at_target"]


# -- the memo's shape and bounds, without a server --------------------------------------------------

NOW = datetime(2026, 11, 27, 3, 1, 53, tzinfo=UTC)


def test_a_host_with_many_dpus_shows_the_first_ones_and_counts_the_rest() -> None:
    dpus = tuple(DPUVersions(dpu_id=f"dpu-{k:02d}", bfb=f"bfb-{k % 3}", dpu_firmware="1") for k in range(20))
    brief = HostVersionsBrief(
        versions=HostVersions(host_id="h", dpus=dpus, host_bmc_firmware="x" * 500),
        targets=VersionTargets(dpu_firmware="1"),
    )
    memo = host_versions.memo_of(brief, "reprovision/h completed", NOW)
    assert list(memo["dpus"]) == [f"dpu-{k:02d}" for k in range(host_versions.DPU_LIMIT)]
    assert memo["dpus_not_shown"] == 20 - host_versions.DPU_LIMIT
    assert len(memo["host_bmc_firmware"]) == host_versions.TEXT_LIMIT
    assert memo["dpus"]["dpu-00"]["dpu_firmware"] == "1 (at target)"
    assert memo["dpus"]["dpu-00"]["flavor"] == "unknown (not reported)"
    assert memo["at_target"] == "yes"
    assert memo["read_at"] == "2026-11-27T03:01:53Z"
    assert host_versions.bfb_attribute(brief).value == ["bfb-0", "bfb-1", "bfb-2"]


def test_a_read_that_failed_as_a_whole_shows_unknown_with_its_reason() -> None:
    memo = host_versions.unknown_memo("activity read_host_versions_brief failed: InvalidInput: no", "x", NOW)
    assert memo["at_target"] == memo["host_bmc_firmware"]
    assert memo["host_bmc_firmware"].startswith("unknown (activity read_host_versions_brief failed")
    assert host_versions.bfb_attribute(None).value == ["unknown"]
    empty = HostVersionsBrief(versions=HostVersions(host_id="h"))
    assert host_versions.bfb_attribute(empty).value is None
    assert host_versions.memo_of(empty, "x", NOW)["at_target"] == "no targets declared"
