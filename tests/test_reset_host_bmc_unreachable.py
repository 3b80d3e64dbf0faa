"""Attack 41a MEDIUM-2, end to end: `host reset HOST --both` with the host's BMC unreachable. Its
ForceOff activity failed (`cannot reach`), nothing was sent, yet the run said "the host host-001 is
OFF: metalflow turned it off (ForceOff of host-001 around the DPU resets)": the reset marked the
host off before the ForceOff was sent. Now it fails naming the BMC it could not reach and says
the host's power was not touched (pure decision: tests/fast/test_force_off_sent.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest
from host_operation_support import FAST_POLICY, worker_for
from sim_support import RunningSim, running_sim, sim_http
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from contracts import names, workflow_api
from contracts.host_entity import HostEntityClient
from contracts.models.host import HostResetResult, HostWorkflowInput, ResetRequest, ResetTarget
from workflows.parts.host_power import HOST_IS_OFF, POWER_NOT_TOUCHED

HOST = "host-001"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(
        tmp_path_factory.mktemp("unreachable"), hosts=1, dpus_per_host=1, initialised=True
    ) as running:
        yield running


@contextlib.asynccontextmanager
async def entity(client: Client, task_queue: str) -> AsyncIterator[HostEntityClient]:
    entities = HostEntityClient(client, task_queue)
    try:
        yield entities
    finally:
        with contextlib.suppress(RPCError):
            await entities.handle(HOST).terminate("the test is over")


async def test_a_full_reset_whose_host_bmc_is_unreachable_says_the_host_was_not_touched(
    client: Client, task_queue: str, sim: RunningSim
) -> None:
    sim_http().post(f"{sim.url}/sim/faults/bmcs/{HOST}/unreachable").raise_for_status()
    try:
        async with worker_for(client, task_queue, sim), entity(client, task_queue) as entities:
            start = HostWorkflowInput(host_id=HOST, policy=FAST_POLICY)
            request = ResetRequest(requested_by="pytest", target=ResetTarget.BOTH)
            await entities.ask(start, workflow_api.HostWorkflow.request_reset, request)
            handle = client.get_workflow_handle(
                names.host_operation_workflow_id("reset", HOST), result_type=HostResetResult
            )
            with pytest.raises(WorkflowFailureError) as failure:
                await handle.result()
        cause = failure.value.cause
        assert isinstance(cause, ApplicationError), cause
        words = cause.message
        assert "cannot reach" in words, words  # what failed, named
        assert HOST_IS_OFF not in words and "turned it off" not in words, words  # before: both said
        assert POWER_NOT_TOUCHED in words, words
    finally:
        sim_http().post(f"{sim.url}/sim/faults/bmcs/{HOST}/clear").raise_for_status()
    assert sim.power_log(HOST) == []  # nothing was sent: the host was On all along
