"""The host layer against the simulated DPF v26 (simulators/dpf/BEHAVIOUR.md), end to end: a real
dev server and worker, the simulated site as a separate process reached over HTTP only.

What each test holds: the reset follows DPF's method and waits out WaitForShutdown; a reboot
loop stops at the policy's bound naming it; the deadline is escalated before it passes while a
DPU sits in a phase the product does not know; a host reset by someone else is recorded and not
followed by a second reboot; an Error reason reprovisioning cannot fix parks the operation.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from host_operation_support import (
    FAST_POLICY,
    aborted_run,
    cycle_by_hand,
    inject_error_when_recreated,
    start_operation,
    status_of,
    wait_for_phase,
    wait_for_status,
    worker_for,
)
from sim_support import RunningSim, running_sim
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from contracts import names, workflow_api
from contracts.models.control import ABORT_UPDATE, RETRY_UPDATE, OperatorAnswer, OperatorRequest
from contracts.models.host import (
    MANUAL_INTERVENTION_REQUIRED,
    HostOperationKind,
    HostRebootInput,
)
from contracts.with_start import execute_update

PROVISION = HostOperationKind.PROVISION
REPROVISION = HostOperationKind.REPROVISION
ALICE = OperatorRequest(requested_by="alice", reason="looked at it")


def reset_types(sim: RunningSim, host_id: str) -> list[str]:
    """The reset type of each power-off in the host's BMC log, in order."""
    return [e["reset_type"] for e in sim.power_log(host_id) if e["to"] == "Off"]


async def test_reset_follows_the_method_and_waits_out_the_arm_shutdown(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """PowerCycle gets a cold cycle; a BF4's SystemLevelReset round is held while its Arm OS
    shuts down (WaitForShutdown, 1 s here) and then gets a warm ForceRestart; DPF's own checks
    (a reset during the shutdown, a removal before its stamp, a warm reset where PowerCycle
    was required) find nothing."""
    with running_sim(
        tmp_path / "sim", hosts=3, dpus_per_host=1, dpf_version="26", timing={"arm_shutdown_seconds": 1.0}
    ) as sim:
        async with worker_for(client, task_queue, sim):
            bf3 = await start_operation(client, task_queue, "host-001", PROVISION)
            bf4 = await start_operation(client, task_queue, "host-003", PROVISION)
            r3, r4 = await asyncio.gather(bf3.result(), bf4.result())
        assert (r3.reboots, r4.reboots) == (1, 2)
        assert reset_types(sim, "host-001") == ["PowerCycle"]
        assert reset_types(sim, "host-003") == ["PowerCycle", "ForceRestart"]
        assert sim.violations() == []


async def test_a_host_trusted_provisioning_records_no_unplanned_reset(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Issue 36 point 6: a host-trusted DPF moves the DPU `Host Network Configuration -> DPU
    Cluster Config` (BEHAVIOUR.md P1); that is no move back, so the run records no unplanned
    reset and provisions with one reboot. Each phase lasts 0.3 s, so the run sees each one."""
    with running_sim(
        tmp_path / "sim", hosts=1, dpus_per_host=1, dpf_version="26", dpf_deployment_mode="host-trusted",
        timing={"dpu_phase_seconds": 0.3},
    ) as sim:  # fmt: skip
        async with worker_for(client, task_queue, sim):
            handle = await start_operation(client, task_queue, "host-001", PROVISION)
            result = await handle.result()
            status = await status_of(handle)
        assert result.reboots == 1 and status.phase == "completed"
        assert status.unplanned_resets == ()
        assert reset_types(sim, "host-001") == ["PowerCycle"]
        assert sim.violations() == []


async def test_with_boot_id_discovery_a_provisioning_goes_on_after_one_reboot(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Issue 36, DPF R4: an agent finding the method by boot ID asks for one SystemLevelReset and
    DPF goes from `Rebooting` on to `DPU Cluster Config`, not back to `DPU Config` (its agent
    starts again there). The run waits for no phase that does not come, reads no move back and no
    unplanned reset (the agent's restart is the one its reboot owed), and resets warm once."""
    with running_sim(
        tmp_path / "sim", hosts=3, dpus_per_host=1, dpf_version="26",
        timing={"arm_shutdown_seconds": 0.5, "dpu_phase_seconds": 0.3},
        extra=("--dpf-reboot-discovery", "boot-id"),
    ) as sim:  # fmt: skip
        async with worker_for(client, task_queue, sim):
            handle = await start_operation(client, task_queue, "host-003", PROVISION)
            result = await handle.result()
            status = await status_of(handle)
        assert result.reboots == 1 and status.phase == "completed"
        assert status.unplanned_resets == ()
        assert reset_types(sim, "host-003") == ["ForceRestart"]
        assert sim.violations() == []


async def test_on_rc3_the_reboot_waits_for_the_rebooted_condition_stamp(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Issue 36 point 8: DPF v26.4.0-rc.3 (NICo's pin) has no `rebootStatus`; its stamp is the
    `Rebooted` condition (BEHAVIOUR.md R7). DPU 1 lags (a phase of 1 s), so it reaches `Rebooting`
    after DPF asked for DPU 0's reboot, and DPF stamps it 4 s later (longer than a reboot here):
    the run waits for that stamp and reboots once; a removal before it would be undone by DPF
    (a violation, another reboot). Issue 36ae: a wait on DPF's stamp longer than
    `dpf_step_seconds` (0.5 s here, 180 s by default) says so in the status, naming the DPU, and
    goes on (before, nothing was said until the phase timeout)."""
    late = "node-host-001-device-host-001-dpu-1"
    policy = FAST_POLICY.model_copy(update={"dpf_step_seconds": 0.5})
    with running_sim(
        tmp_path / "sim", hosts=1, dpus_per_host=2, dpf_version="26.4-rc.3", initialised=True,
        timing={"reboot_stamp_seconds": 4.0},
    ) as sim:  # fmt: skip
        sim.inject(f"dpus/{late}/phase", {"phase": "Perform ARM Force Restart", "seconds": 1})
        async with worker_for(client, task_queue, sim):
            handle = await start_operation(client, task_queue, "host-001", REPROVISION, policy=policy)
            said = await wait_for_status(
                handle, lambda s: "DPF has not moved" in s.waiting_for, "the overdue stamp said", timeout=30
            )
            result = await handle.result()
        assert said.phase == "waiting-for-reboot-request"
        assert f"has not readied {late} (no Rebooted condition)" in said.waiting_for
        assert result.reboots == 1
        assert reset_types(sim, "host-001") == ["PowerCycle"]
        assert sim.violations() == []


async def test_a_dpu_in_rebooting_before_its_sibling_is_stamped_with_it_and_the_host_rebooted_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Issue 36ae (the attacker's stall): DPU 1 reaches `Rebooting` first while DPU 0 reboots
    itself once in `DPU Config` (its agent's FirmwareReset): DPF defers its request, then asks
    once DPU 0 follows and stamps BOTH (BEHAVIOUR.md R1, R3). The simulator used to leave DPU 1
    out of the round (`Pending`/`RebootRequested` beside a stamped DPU 0, the DPUNode "driven by"
    DPU 0), and the reprovision waited for its stamp until the phase timeout."""
    first = "node-host-001-device-host-001-dpu-0"
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2, dpf_version="26", initialised=True) as sim:
        sim.inject(f"dpus/{first}/agent", {"methods": ["FirmwareReset", "PowerCycle"]})
        async with worker_for(client, task_queue, sim):
            handle = await start_operation(client, task_queue, "host-001", REPROVISION)
            result = await asyncio.wait_for(handle.result(), timeout=30)
        assert result.reboots == 1
        assert reset_types(sim, "host-001") == ["PowerCycle"]
        assert sim.violations() == []


async def test_a_warm_reset_that_did_not_reach_the_dpu_is_reissued_within_the_agent_bound(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Issue 36 point 4: DPF asks for a SystemReboot (a warm ForceRestart here) but the warm reset
    does not reach the DPU (fault `warm-reset-ignored`, BEHAVIOUR.md A4): DPF leaves `Rebooting`
    at the removal and waits in `DPU Config` for a fresh agent start. The run sees the agent's
    `lastStartupTime` unchanged after `agent_restart_wait_seconds` (1 s here, 900 s by default)
    and reboots again, cold (a PowerCycle: a warm reset is not sent again); then the agent starts
    and the DPU provisions. Before, the run waited until the phase timeout (an hour by default)."""
    policy = FAST_POLICY.model_copy(update={"agent_restart_wait_seconds": 1.0, "force_off_from_retry": 2})
    dpu = "node-host-003-device-host-003-dpu-0"
    with running_sim(tmp_path / "sim", hosts=3, dpus_per_host=1, dpf_version="26", initialised=True) as sim:
        sim.inject(f"dpus/{dpu}/agent", {"methods": ["SystemReboot"]})
        sim.inject(f"dpus/{dpu}/warm-reset-ignored")
        async with worker_for(client, task_queue, sim):
            handle = await start_operation(client, task_queue, "host-003", REPROVISION, policy=policy)
            await asyncio.wait_for(handle.result(), timeout=60)
            status = await status_of(handle)
        assert reset_types(sim, "host-003") == ["ForceRestart", "PowerCycle"]
        assert status.phase == "completed" and status.power_cycles_issued == 2
        assert sim.violations() == []


async def test_a_reboot_loop_stops_at_the_policy_bound(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The DPU agent keeps asking (SystemReboot, again and again): the third request of one
    sequence passes the bound of 2 and the run fails with `RebootLoop` naming DPU and count,
    after exactly two reboots."""
    policy = FAST_POLICY.model_copy(update={"max_reboot_sequence_count": 2})
    dpu = "node-host-002-device-host-002-dpu-0"
    with running_sim(tmp_path / "sim", hosts=2, dpus_per_host=1, dpf_version="26", initialised=True) as sim:
        sim.inject(f"dpus/{dpu}/agent", {"methods": ["SystemReboot"] * 6})
        async with worker_for(client, task_queue, sim):
            handle = await start_operation(client, task_queue, "host-002", REPROVISION, policy=policy)
            with pytest.raises(WorkflowFailureError) as failure:
                await handle.result()
            status = await status_of(handle)
        cause = failure.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "RebootLoop"
        assert (
            f"DPU {dpu} asks for host reboot 3" in cause.message and "rebootSequenceCount 3" in cause.message
        )
        assert status.phase == "failed" and status.power_cycles_issued == 2
        assert len(reset_types(sim, "host-002")) == 2
        assert sim.violations() == []


async def test_the_dpus_own_reboots_do_not_make_a_reboot_loop(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Issue 36 point 5: the agent counts the DPU's own reboots too (BEHAVIOUR.md A1). A DPU
    that reboots itself three times (DPUWarmReboot, FirmwareReset, DPUWarmReboot), then asks for
    two host reboots, reaches `rebootSequenceCount` 5 having asked for two reboots of ours: under
    the default bound of 3 the run provisions it, after exactly two reboots."""
    dpu = "node-host-001-device-host-001-dpu-0"
    own = ["DPUWarmReboot", "FirmwareReset", "DPUWarmReboot"]
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=1, dpf_version="26", initialised=True) as sim:
        sim.inject(f"dpus/{dpu}/agent", {"methods": [*own, "PowerCycle", "PowerCycle"]})
        async with worker_for(client, task_queue, sim):
            handle = await start_operation(client, task_queue, "host-001", REPROVISION)
            result = await handle.result()
        assert FAST_POLICY.max_reboot_sequence_count == 3 and result.reboots == 2
        assert len(reset_types(sim, "host-001")) == 2
        assert sim.violations() == []


async def test_deadline_escalated_while_a_dpu_is_in_an_unknown_phase(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """DPU 1 passes a phase the product does not know (`Host OS Init Release`, 8 s) while DPU 0
    already asks for the reboot: the barrier waits (an unknown phase is progress), and asks an
    operator 3 s after DPF asked, naming the deadline (6 s here, 2 h by default). Someone resets
    the host meanwhile, before DPU 1's install: that reset cannot serve the round, so after
    `retry` the run still reboots once itself (and never twice)."""
    policy = FAST_POLICY.model_copy(
        update={"dpf_reboot_deadline_seconds": 6.0, "escalate_before_deadline_seconds": 3.0}
    )
    late = "node-host-001-device-host-001-dpu-1"
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=2, dpf_version="26", initialised=True) as sim:
        sim.inject(f"dpus/{late}/phase", {"phase": "Host OS Init Release", "seconds": 8})
        async with worker_for(client, task_queue, sim):
            handle = await start_operation(client, task_queue, "host-001", REPROVISION, policy=policy)
            asked = await wait_for_phase(handle, MANUAL_INTERVENTION_REQUIRED, timeout=60)
            assert asked.manual_intervention_reason is not None
            assert "cluster-join secret expires" in asked.manual_intervention_reason
            assert "host-001-dpu-1 in Host OS Init Release" in asked.manual_intervention_reason
            assert asked.reboot_deadline_at is not None
            await cycle_by_hand(sim, "host-001")
            await wait_for_status(
                handle, lambda s: [d.phase for d in s.dpus] == ["Rebooting", "Rebooting"], "both Rebooting"
            )
            await execute_update(handle, RETRY_UPDATE, ALICE, result_type=OperatorAnswer)
            result = await handle.result()
            final = await status_of(handle)
        assert result.reboots == 1 and final.phase == "completed"
        assert len(reset_types(sim, "host-001")) == 2  # by hand, then ours: the round is served once
        assert sim.violations() == []


async def test_an_error_reprovisioning_cannot_fix_parks_the_operation(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`UnsupportedNodeRebootMethod` (a DPF configuration problem): no automatic reprovision;
    the run asks an operator naming the reason, and `abort` ends it."""
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=1, dpf_version="26", initialised=True) as sim:
        dpu = "node-host-001-device-host-001-dpu-0"
        async with worker_for(client, task_queue, sim):
            handle = await start_operation(client, task_queue, "host-001", REPROVISION)
            await inject_error_when_recreated(handle, sim, dpu, {"reason": "UnsupportedNodeRebootMethod"})
            parked = await wait_for_phase(handle, MANUAL_INTERVENTION_REQUIRED, timeout=60)
            assert "Rebooted: UnsupportedNodeRebootMethod" in (parked.manual_intervention_reason or "")
            assert [d.error_reprovisions for d in parked.dpus] == [0]
            await execute_update(handle, ABORT_UPDATE, ALICE, result_type=OperatorAnswer)
            assert (await aborted_run(handle)).startswith("aborted by alice")


async def test_a_reboot_owed_since_before_a_reset_by_hand_sends_nothing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The reboot of a round a reset by someone else already served (LastResetTime after the
    time it was owed): `already_done`, and the BMC log shows only the reset by hand."""
    with running_sim(tmp_path / "sim", hosts=1, dpus_per_host=1) as sim:
        async with worker_for(client, task_queue, sim):
            owed = datetime.now(UTC)
            await asyncio.sleep(1.1)  # LastResetTime has one-second resolution
            await cycle_by_hand(sim, "host-001")
            result = await client.execute_workflow(
                workflow_api.HostRebootWorkflow.run,
                HostRebootInput(
                    host_id="host-001", boot_generation=900, requested_by="pytest", owed_since=owed,
                    policy=FAST_POLICY,
                ),
                id=names.host_reboot_workflow_id("host-001", 900) + f"-{task_queue}",
                task_queue=task_queue,
            )  # fmt: skip
        assert result.already_done and result.reset_types == ()
        assert reset_types(sim, "host-001") == ["ForceOff"]
