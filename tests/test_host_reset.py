"""Reset sequences (`reset/<host>`, workflows/host_reset/workflow.py) through the host's entity, on the
simulated site (a separate process) with a real worker; and the DPU reset's exactly-once guard
(drivers/redfish/dpu_reset.py) against served BMCs.

What is held: the DPU-only full reset runs host off, DPU PowerCycle, host on, DPU up (once each;
the DPU's Arm boots with its host, simulators/redfish/BEHAVIOUR.md B10); a reset a DPU's BMC
cannot do (it does not advertise PowerCycle) is refused before the host is touched;
a Paused DPU is recovered by ForceRestart; an abort while a DPU boots powers the host back on;
a reset is refused while a DPU installs and held for approval on an assigned host; a retried
DPU reset whose first attempt was taken sends nothing again. The host's off and on take the
BMC's fleet-wide lease as a reboot does (issue 25): two full resets and a reboot of hosts behind
one BMC with a limit of 1 never have two hosts off at once; an abort while queued for the lease
sends nothing and gives the place back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from bmc_lease_support import HOSTS, lease_of, lease_status, one_slot_held
from host_operation_support import (
    FAST_POLICY,
    aborted_run,
    eventually,
    power_cycles,
    save_history,
    start_reboot,
    wait_for_query,
    worker_for,
)
from sim_support import RunningSim, running_sim, sim_http
from takeover_support import takeover_seconds
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from contracts import names, workflow_api
from contracts.host_entity import EntityRefused, HostEntityClient
from contracts.models.control import ABORT_UPDATE, STATUS_QUERY, OperatorAnswer, OperatorRequest
from contracts.models.host import (
    AssignInstanceRequest,
    HostResetResult,
    HostResetStatus,
    HostWorkflowInput,
    ResetRequest,
    ResetTarget,
)
from contracts.models.inventory import BMCAccess, CredentialRef
from contracts.models.redfish import DPUResetInput, DPUResetProgress
from contracts.with_start import execute_update
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from drivers.redfish.dpu_reset import DPUReset
from drivers.settings import Settings
from metalflow.runtime.worker import build_worker
from simulators.redfish.standalone import serve_bmcs
from simulators.site import default_site
from simulators.timings import timings_for

DPU0 = "host-001-dpu-0"


# Sites shared by tests on hosts of their own (a simulator's start is seconds of CPU): two DPUs a
# host, a DPU's boot 0.5 s (test_dpu_only_full_reset on host-001, test_a_full_reset_a_dpu_bmc_cannot_do
# on host-002); one DPU a host (test_refused_while_a_dpu_installs on hosts 1 and 2,
# test_a_paused_dpu on host-003).
@pytest.fixture(scope="module")
def two_dpu_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(
        tmp_path_factory.mktemp("two-dpus"), hosts=2, dpus_per_host=2, initialised=True,
        timing={"dpu_boot_seconds": 0.5},
    ) as sim:  # fmt: skip
        yield sim


@pytest.fixture(scope="module")
def one_dpu_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("one-dpu"), hosts=3, dpus_per_host=1, initialised=True) as sim:
        yield sim


def dpu_bmc(sim: RunningSim, dpu_id: str) -> dict[str, Any]:
    response = sim_http().get(f"{sim.url}/sim/dpu-bmcs/{dpu_id}")
    response.raise_for_status()
    found: dict[str, Any] = response.json()
    return found


@contextlib.asynccontextmanager
async def entity(client: Client, task_queue: str, host_id: str) -> AsyncIterator[HostEntityClient]:
    """The host's entity client; the entity is terminated at the end (tests share the server)."""
    entities = HostEntityClient(client, task_queue)
    try:
        yield entities
    finally:
        with contextlib.suppress(RPCError):
            await entities.handle(host_id).terminate("the test is over")


async def ask_reset(entities: HostEntityClient, host_id: str, request: ResetRequest) -> Any:
    start = HostWorkflowInput(host_id=host_id, policy=FAST_POLICY)
    return await entities.ask(start, workflow_api.HostWorkflow.request_reset, request)


def reset_of(client: Client, host_id: str) -> Any:
    return client.get_workflow_handle(
        names.host_operation_workflow_id("reset", host_id), result_type=HostResetResult
    )


def _second(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).replace(microsecond=0)


async def test_dpu_only_full_reset_runs_host_off_dpu_reset_host_on_dpu_up(
    client: Client, task_queue: str, two_dpu_site: RunningSim
) -> None:
    """The DPU's Arm has no power while its host is off (BEHAVIOUR.md B10, B12): its OS is
    awaited after the host's On. On main the reset waited for it with the host off and ended in
    DPUResetNotEffective after the whole boot timeout."""
    with nullcontext(two_dpu_site) as sim:
        async with worker_for(client, task_queue, sim), entity(client, task_queue, "host-001") as entities:
            accepted = await ask_reset(
                entities, "host-001",
                ResetRequest(requested_by="pytest", target=ResetTarget.DPU, dpu_ids=(DPU0,), full=True),
            )  # fmt: skip
            assert accepted.workflow_id == "reset/host-001"
            result = await reset_of(client, "host-001").result()
            await save_history(reset_of(client, "host-001"), "host_reset_dpu_full")
        power = sim.power_log("host-001")
        log = [(e["to"], e["reset_type"]) for e in power]
        assert log == [("Off", "ForceOff"), ("On", "On")]
        state = dpu_bmc(sim, DPU0)
        assert (state["resets"], state["nic_resets"], state["arm"]) == ({"PowerCycle": 1}, 1, "OsIsRunning")
        assert _second(state["arm_since"]) >= _second(power[1]["time"])  # up after the host's On
        assert dpu_bmc(sim, "host-001-dpu-1")["resets"] == {}  # the sibling is not touched
        assert result.resets == (f"{DPU0}: PowerCycle", "host host-001: ForceOff, On around the DPU resets")
        assert sim.violations() == []


async def test_a_full_reset_a_dpu_bmc_cannot_do_is_refused_before_the_host_is_touched(
    client: Client, task_queue: str, two_dpu_site: RunningSim
) -> None:
    """A DPU BMC that does not advertise PowerCycle (BEHAVIOUR.md B13): refused naming it and
    what it takes, nothing sent. On main the host was turned off first and the send refused."""
    dpu0 = "host-002-dpu-0"
    with nullcontext(two_dpu_site) as sim:  # on host-002: test_dpu_only_full_reset has host-001
        sim.inject("dpu-bmcs/host-002-dpu-1/no-powercycle")
        async with worker_for(client, task_queue, sim), entity(client, task_queue, "host-002") as entities:
            await ask_reset(
                entities, "host-002", ResetRequest(requested_by="pytest", target=ResetTarget.BOTH)
            )
            with pytest.raises(WorkflowFailureError) as failure:
                await reset_of(client, "host-002").result()
        cause = failure.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "ResetTypeNotSupported"
        assert cause.message.startswith("reset of host-002 refused before anything was sent"), cause.message
        takes = "host-002-dpu-1's BMC takes GracefulRestart, ForceRestart, GracefulShutdown, On"
        assert takes in cause.message
        assert dpu0 not in cause.message.split(". Done:")[0]
        assert sim.power_log("host-002") == []  # the host was never turned off
        assert dpu_bmc(sim, dpu0)["resets"] == dpu_bmc(sim, "host-002-dpu-1")["resets"] == {}


async def test_a_paused_dpu_is_recovered_by_its_arm_reset(
    client: Client, task_queue: str, one_dpu_site: RunningSim
) -> None:
    dpu0 = "host-003-dpu-0"  # host-003: test_refused_while_a_dpu_installs has hosts 1 and 2
    with nullcontext(one_dpu_site) as sim:
        sim_http().post(f"{sim.url}/sim/faults/dpu-bmcs/{dpu0}/paused").raise_for_status()
        async with worker_for(client, task_queue, sim), entity(client, task_queue, "host-003") as entities:
            await ask_reset(
                entities, "host-003", ResetRequest(requested_by="pytest", target=ResetTarget.ALL_DPUS)
            )
            result = await reset_of(client, "host-003").result()
        state = dpu_bmc(sim, dpu0)
        assert (state["paused"], state["arm"], state["resets"]) == (False, "OsIsRunning", {"ForceRestart": 1})
        assert result.resets == (f"{dpu0}: ForceRestart",)
        assert sim.power_log("host-003") == []  # the host kept running


async def test_an_abort_while_the_dpu_boots_ends_with_the_host_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=1, initialised=True,
                     timing={"dpu_boot_seconds": 60}) as sim:  # fmt: skip
        async with worker_for(client, task_queue, sim), entity(client, task_queue, "host-001") as entities:
            await ask_reset(
                entities, "host-001", ResetRequest(requested_by="pytest", target=ResetTarget.BOTH)
            )
            handle = reset_of(client, "host-001")

            # The DPU boots once the host is on again (BEHAVIOUR.md B10): the run waits for its OS.
            await wait_for_query(
                lambda: handle.query(STATUS_QUERY, result_type=HostResetStatus),
                lambda s: s.phase == "waiting-for-dpu-os",
                "the reset waiting for the DPU's OS",
                60,
            )
            assert dpu_bmc(sim, DPU0)["nic_resets"] == 1
            await execute_update(
                handle,
                ABORT_UPDATE,
                OperatorRequest(requested_by="alice", reason="enough"),
                result_type=OperatorAnswer,
            )
            aborted = await aborted_run(handle)
        assert aborted.endswith(
            f"Done: {DPU0}: PowerCycle; host host-001: ForceOff, On around the DPU resets; the host is on"
        ), aborted  # issue 40; the DPU boots with the host on (BEHAVIOUR.md B10)
        log = [(e["to"], e["reset_type"]) for e in sim.power_log("host-001")]
        assert log == [("Off", "ForceOff"), ("On", "On")]  # never left off


async def test_refused_while_a_dpu_installs_and_held_for_approval_on_an_assigned_host(
    client: Client, task_queue: str, one_dpu_site: RunningSim
) -> None:
    with nullcontext(one_dpu_site) as sim:
        async with worker_for(client, task_queue, sim), entity(client, task_queue, "host-002") as entities:
            start = HostWorkflowInput(host_id="host-002", policy=FAST_POLICY)
            await entities.ask(start, workflow_api.HostWorkflow.assign_instance,
                               AssignInstanceRequest(instance="vm-7", requested_by="pytest"))  # fmt: skip
            held = await ask_reset(
                entities, "host-002", ResetRequest(requested_by="pytest", target=ResetTarget.HOST)
            )
            assert held.awaiting_approval
            with pytest.raises(EntityRefused, match="busy"):
                await ask_reset(
                    entities, "host-002", ResetRequest(requested_by="pytest", target=ResetTarget.HOST)
                )
        # A DPU in an install phase: the reset is refused before anything is touched.
        dpu = "node-host-001-device-host-001-dpu-0"
        sim.inject(f"dpus/{dpu}/phase", {"phase": "OS Installing", "seconds": 60})
        sim_http().delete(
            f"{sim.url}/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpus/{dpu}",
            headers=sim.headers, timeout=10,
        ).raise_for_status()  # fmt: skip

        async def installing() -> bool:
            got = sim_http().get(
                f"{sim.url}/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpus/{dpu}",
                headers=sim.headers, timeout=10,
            )  # fmt: skip
            return got.status_code == 200 and (got.json().get("status") or {}).get("phase") == "OS Installing"

        await eventually(installing, what="the recreated DPU in OS Installing")
        async with worker_for(client, task_queue, sim), entity(client, task_queue, "host-001") as entities:
            await ask_reset(
                entities, "host-001", ResetRequest(requested_by="pytest", target=ResetTarget.ALL_DPUS)
            )
            with pytest.raises(WorkflowFailureError) as failure:
                await reset_of(client, "host-001").result()
        cause = failure.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "HostBusy"
        assert "OS Installing" in cause.message
        assert dpu_bmc(sim, DPU0)["resets"] == {}


async def test_a_retried_dpu_reset_whose_reset_was_taken_sends_nothing(tmp_path: Path) -> None:
    """The attempt recorded `reset_requested` with the mark before, sent, and died: the retry
    sees the mark moved and sends nothing. Deliberate break: a retry that trusts a lost step
    (resumes from `started`) resets the DPU a second time."""
    site = default_site(1, 1)
    timings = timings_for("zero", dpu_boot_seconds=0.1)
    async with serve_bmcs(site, timings=timings) as bmcs:
        user, password = bmcs.credentials[DPU0]
        secret = tmp_path / "dpu.json"
        secret.write_text(f'{{"username": "{user}", "password": "{password}"}}')
        access = BMCAccess(bmc_id=DPU0, endpoint=bmcs.base(DPU0), credentials=CredentialRef(file=str(secret)))
        request = DPUResetInput(bmc=access, reset_type="ForceRestart", owed_since=datetime.now(UTC))
        recorded: list[DPUResetProgress] = []
        redfish = RedfishClient(CredentialResolver(None))
        try:
            async with redfish.connect(access) as connection:
                first = DPUReset(connection, request, None, persist=recorded.append, confirm=None)
                assert (await first.run()).sent
                sent_at = next(p for p in recorded if p.step == "reset_requested")
                retry = DPUReset(connection, request, sent_at, persist=recorded.append, confirm=None)
                await retry.run()
                assert bmcs.bmcs.reset_counts(DPU0) == {"ForceRestart": 1}
                await asyncio.sleep(0.2)
                broken = DPUReset(
                    connection, request, DPUResetProgress(), persist=recorded.append, confirm=None
                )
                await broken.run()
                assert bmcs.bmcs.reset_counts(DPU0) == {"ForceRestart": 2}
        finally:
            await redfish.aclose()


def chassis_with_dpus(tmp_path: Path, **timing: float) -> contextlib.AbstractContextManager[RunningSim]:
    """HOSTS behind ONE multi-system BMC (one endpoint: one lease), each with one DPU of its own
    BMC, every DPU Ready."""
    site = {
        "name": "chassis",
        "hosts": [
            {
                "id": h,
                "bmc": {"profile": "multi-system", "group": "chassis-a"},
                "dpus": [{"id": f"{h}-dpu-0"}],
            }
            for h in HOSTS
        ],
    }
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(site))
    return running_sim(tmp_path / "sim", site_file=tmp_path / "site.yaml", initialised=True, timing=timing)


@pytest.fixture(scope="module")
def chassis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    """The chassis site of the lease tests (a DPU's boot 2 s: a full reset keeps its host off that
    long), one for both: the second sends nothing and asserts so of what it sees after its start."""
    with chassis_with_dpus(tmp_path_factory.mktemp("chassis"), dpu_boot_seconds=2.0) as sim:
        yield sim


def off_spans(log: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The (Off, back On) times of each power-down in a host's power log."""
    spans, off = [], None
    for entry in log:
        if entry["to"] == "Off":
            off = entry["time"]
        elif entry["to"] == "On" and off is not None:
            spans.append((off, entry["time"]))
            off = None
    assert off is None, f"left off: {log}"
    return spans


async def test_resets_and_a_reboot_behind_one_bmc_limit_one_never_have_two_hosts_off(
    client: Client, task_queue: str, chassis: RunningSim
) -> None:
    """Two full resets (each keeps its host off while its DPU boots, 2 s) and a reboot, at once,
    on one BMC with METALFLOW_BMC_MAX_IN_FLIGHT=1. Before the fix the resets' ForceOff/On took
    no lease: both hosts were off together (systems_off_peak 2), and beside the reboot's cycle."""
    with nullcontext(chassis) as sim:
        settings = Settings(
            site_file=sim.site_file,
            kubeconfig=sim.kubeconfig,
            bmc_max_in_flight=1,
            worker_takeover_seconds=takeover_seconds(),
        )
        async with (
            build_worker(client, task_queue, settings),
            entity(client, task_queue, HOSTS[0]) as entities,
            entity(client, task_queue, HOSTS[1]),
        ):
            both = ResetRequest(requested_by="pytest", target=ResetTarget.BOTH)
            await asyncio.gather(*(ask_reset(entities, host, both) for host in HOSTS[:2]))
            reboot = await start_reboot(client, task_queue, HOSTS[2])
            results = await asyncio.wait_for(
                asyncio.gather(*(reset_of(client, h).result() for h in HOSTS[:2]), reboot.result()), 120
            )
            await save_history(reset_of(client, HOSTS[0]), "host_reset_bmc_leased")
            lease = await asyncio.wait_for(lease_of(client, sim, HOSTS[0], task_queue).result(), 60)
        logs = {host: sim.power_log(host) for host in HOSTS}
        load = sim.bmc_load(HOSTS[0])
        dpus = {host: dpu_bmc(sim, f"{host}-dpu-0") for host in HOSTS[:2]}
        violations = sim.violations()

    assert [r.resets[-1] for r in results[:2]] == [
        f"host {h}: ForceOff, On around the DPU resets" for h in HOSTS[:2]
    ]
    assert {h: power_cycles(log) for h, log in logs.items()} == dict.fromkeys(HOSTS, 1)
    assert {h: (d["resets"], d["arm"]) for h, d in dpus.items()} == dict.fromkeys(
        HOSTS[:2], ({"PowerCycle": 1}, "OsIsRunning")
    )
    assert load["systems_off_peak"] == 1, load
    spans = sorted(span for log in logs.values() for span in off_spans(log))
    assert all(on <= next_off for (_, on), (next_off, _) in zip(spans, spans[1:], strict=False)), spans
    assert (lease.holders, lease.waiting, lease.reclaimed) == ((), (), 0)
    assert violations == []


async def test_a_reset_aborted_while_queued_for_the_lease_sends_nothing_and_gives_its_place_back(
    client: Client, task_queue: str, chassis: RunningSim
) -> None:
    """The BMC's one slot is held; a full reset queues for it and is aborted there. Before the
    fix the reset took no lease: it turned the host off beside the holder."""
    host = HOSTS[0]
    with nullcontext(chassis) as sim:
        # The module's chassis: what earlier tests sent to this host and its DPU is not this test's.
        since, resets_before = len(sim.power_log(host)), dpu_bmc(sim, f"{host}-dpu-0")["resets"]
        async with (
            one_slot_held(client, task_queue, sim) as held,
            entity(client, task_queue, host) as entities,
        ):
            await ask_reset(entities, host, ResetRequest(requested_by="pytest", target=ResetTarget.BOTH))
            handle = reset_of(client, host)
            await wait_for_query(
                lambda: lease_status(held.lease),
                lambda s: s is not None and len(s.waiting) == 1,
                "the reset queued for the lease",
                60,
            )
            # ... and the reset itself waiting for the grant (the lease queues it before the reset has
            # its answer: an abort then ends it before `hold`, a path of its own, with other words).
            await wait_for_query(
                lambda: handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata),
                lambda shown: "waiting for a slot of the BMC's lease" in shown.current_details,
                "the reset waiting for its grant",
                60,
            )
            # `host status` says so (the reset's `status` query): the lease, and the way out.
            queued = await handle.query("status", result_type=HostResetStatus)
            assert queued.waiting_for == (
                f"a slot of the BMC's lease {held.lease.id} (queued: nothing sent to the BMC yet; "
                f"`metalflow host abort {host}` withdraws it)"
            ), queued
            answer = await execute_update(
                handle,
                ABORT_UPDATE,
                OperatorRequest(requested_by="alice", reason="not now"),
                result_type=OperatorAnswer,
            )
            assert answer.accepted, answer
            # Attack 40f (LOW): the promise names the withdrawn queued reset, nothing "at a safe point".
            assert answer.message.endswith(
                f"the reset queued for a slot of the BMC's lease {held.lease.id} is withdrawn (its "
                "place given back): no power action was sent to the BMC"
            ), answer
            aborted = await aborted_run(handle)
            await save_history(handle, "host_reset_lease_queue_abort")
            after = await wait_for_query(
                lambda: lease_status(held.lease),
                lambda s: s is not None and not s.waiting,
                "the queued place given back",
                60,
            )
            assert after is not None and len(after.holders) == 1 and after.granted == 1, after
            await held.holder.terminate("test done")
        log = sim.power_log(host)[since:]
        dpu = dpu_bmc(sim, f"{host}-dpu-0")

    assert "nothing was sent to the BMC" in aborted, aborted
    assert log == [] and dpu["resets"] == resets_before  # nothing sent, to the host's BMC or the DPU's
