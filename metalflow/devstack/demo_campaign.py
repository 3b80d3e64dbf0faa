"""The demo's last step: a real campaign over the simulated site's hosts, as `metalflow campaign
start demo-fleet --hosts ... --reprovision --canary 1 --batch-size 1 --failure-budget 1` does.

A canary (the first host) that must succeed, then two batches of one host; the last host's DPU is
put in Error by the simulator while it installs (its policy allows no automatic reprovision), so
that host fails and the failure budget (1) absorbs it: the campaign completes with one failure.
Progress is printed live (`metalflow.progress`, one line per change of the `status` query), and
the Temporal UI query that lists the campaign and every host operation it started.

A restarted `metalflow dev` (same state dir) finds the campaign's history and prints its result
instead of running it again, as it does not provision the restored hosts again.

Cost: one campaign workflow, its hosts' operations one at a time (soak 0, the demo policy's short
waits), a `status` query and at most one operation query every half second, one fault injection.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import yaml
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from contracts import names, workflow_api
from contracts.models.campaign import (
    CampaignInput,
    CampaignResult,
    CampaignStatus,
    CampaignTarget,
    FailureBudget,
    HostSelection,
    Limits,
    TargetKind,
)
from contracts.models.campaign_progress import Failure
from contracts.models.control import STATUS_QUERY
from contracts.models.control import STATUS_QUERY as OPERATION_STATUS_QUERY
from contracts.models.host import HostOperationStatus, OperationPolicy
from contracts.wording import plural
from metalflow.devstack.stack import DevStackConfig
from metalflow.progress import Progress
from metalflow.rollouts import root_cause

DEMO_CAMPAIGN = "demo-fleet"
DEMO_TARGET = CampaignTarget(kind=TargetKind.REPROVISION)  # its operation's DPUs are where it injects
INJECTED = "injected by the demo: a DPU that fails to install"
# Phases before the reprovision recreated its DPUs: an error injected then would hit the old DPU.
BEFORE_INSTALL = ("resolving-inventory", "deleting-dpus", "starting")
POLL_SECONDS = 0.5


def render(status: CampaignStatus) -> str:
    """One line of the campaign's progress (the same counts as `metalflow campaign status`)."""
    finished = status.done + status.already_at_target + status.failed + status.skipped
    line = (
        f"{status.phase}, batch {status.batch}: {finished}/{status.total} finished: {status.done} done, "
        f"{len(status.in_flight)} in flight ({', '.join(status.in_flight) or '-'}), {status.failed} failed; "
        f"budget: {status.budget}"
    )
    return line + (f"; {status.halted_reason}" if status.halted_reason else "")


async def run_campaign_demo(
    client: Client,
    config: DevStackConfig,
    sim_url: str,
    site: dict[str, Any],
    policy: OperationPolicy,
    progress: Progress,
    task_queue: str = names.TASK_QUEUE,
) -> bool:
    """Run the demo campaign to its end; True when it completed with exactly the injected failure."""
    say = progress.note
    hosts = [h for h in site.get("hosts", []) if h.get("dpus")]
    if len(hosts) < 3:
        say("demo: the campaign needs 3 hosts with DPUs; skipped")
        return True
    ids = [h["id"] for h in hosts]
    victim, victim_dpu = ids[-1], hosts[-1]["dpus"][0]["id"]
    query = f'{names.CAMPAIGN.name}="{DEMO_CAMPAIGN}"'
    say(
        f"demo: campaign {DEMO_CAMPAIGN}: reprovision {', '.join(ids)}: canary {ids[0]}, then batches of 1; "
        f"failure budget 1; {victim}'s DPU {victim_dpu} will fail to install"
    )
    ui = f"{config.ui_url}/namespaces/{config.namespace}/workflows?query={quote(query, safe='')}"
    say(f"demo:   the campaign and every operation it started: {ui}")
    say(f"demo:   (`metalflow campaign status {DEMO_CAMPAIGN}`, its `status` query, Phase, current details)")
    handle = client.get_workflow_handle(names.campaign_workflow_id(DEMO_CAMPAIGN), result_type=CampaignResult)
    if await _ran_before(handle):  # a restarted `metalflow dev`: its history is in the state dir
        say(f"demo: campaign {DEMO_CAMPAIGN} ran already in this state dir (the restored site): not again")
        return await _report(handle, victim, len(ids), say)
    handle = await _start(client, task_queue, ids, policy, say)
    injected, last = False, ""
    while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        try:
            status: CampaignStatus = await handle.query(STATUS_QUERY, result_type=CampaignStatus)
        except RPCError:  # between runs (continue-as-new): ask again
            await asyncio.sleep(POLL_SECONDS)
            continue
        line = render(status)
        if line != last:
            say(f"demo:   {line}")
            last = line
        if not injected and victim in status.in_flight:
            injected = await _inject_when_installing(client, sim_url, victim, victim_dpu)
            if injected:
                say(f"demo:   injected: {victim_dpu} in Error while installing ({victim}'s policy: no retry)")
        await asyncio.sleep(POLL_SECONDS)
    return await _report(handle, victim, len(ids), say)


async def _ran_before(handle: WorkflowHandle[Any, CampaignResult]) -> bool:
    try:
        described = await handle.describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return described.status != WorkflowExecutionStatus.RUNNING


def failure_line(failure: Failure) -> str:
    """The demo's line for a host that failed: the reason says "failed" once (a reason already
    begins with it: `failed host-003: failed: DPUFailed: ...` read it twice, issue 38)."""
    return f"demo:   failed {failure.host_id}: {failure.reason.removeprefix('failed: ')}"


async def _report(handle: WorkflowHandle[Any, CampaignResult], victim: str, hosts: int, say: Any) -> bool:
    """Print the campaign's result; True when it completed with exactly the injected failure."""
    try:
        result = await handle.result()
    except WorkflowFailureError as err:
        say(f"demo: campaign {DEMO_CAMPAIGN} FAILED: {root_cause(err)}")
        return False
    failed = [f.host_id for f in result.failures]
    say(
        f"demo: campaign {DEMO_CAMPAIGN} {result.outcome}: {result.done} done, {len(failed)} failed "
        f"({', '.join(failed) or '-'}) of {result.total}, within the failure budget"
    )
    for failure in result.failures:
        say(failure_line(failure))
    return result.outcome == "completed" and failed == [victim] and result.done == hosts - 1


async def _start(
    client: Client, task_queue: str, ids: list[str], policy: OperationPolicy, say: Any
) -> WorkflowHandle[Any, CampaignResult]:
    request = CampaignInput(
        name=DEMO_CAMPAIGN,
        target=DEMO_TARGET,
        selection=HostSelection(hosts=tuple(ids)),
        canary=1,
        limits=Limits(batch_size=1, max_in_flight=1),
        budget=FailureBudget(max_failures=1),
        requested_by="metalflow dev demo",
        reason="metalflow dev demo",
        host_policy=policy.model_copy(update={"max_dpu_error_reprovisions": 0}),
    )
    workflow_id = names.campaign_workflow_id(DEMO_CAMPAIGN)
    try:
        return await client.start_workflow(
            workflow_api.CampaignWorkflow.run,
            request,
            id=workflow_id,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=(
                f"demo: campaign {DEMO_CAMPAIGN}, {DEMO_TARGET.describe()} {plural(len(ids), 'host')}"
            ),
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(names.OPERATION, names.CAMPAIGN_OPERATION),
                    SearchAttributePair(names.CAMPAIGN, DEMO_CAMPAIGN),
                ]
            ),
        )
    except WorkflowAlreadyStartedError:
        say(f"demo: campaign {DEMO_CAMPAIGN} is already running; following it")
        return client.get_workflow_handle(workflow_id, result_type=CampaignResult)


async def _inject_when_installing(client: Client, sim_url: str, host: str, dpu: str) -> bool:
    """Put the host's DPU in Error once its reprovision recreated it; False: not yet."""
    operation_id = names.host_operation_workflow_id(DEMO_TARGET.spec.request, host)
    operation = client.get_workflow_handle(operation_id)
    try:
        status = await operation.query(OPERATION_STATUS_QUERY, result_type=HostOperationStatus)
    except RPCError:
        return False
    if status.phase in BEFORE_INSTALL:
        return False
    async with httpx.AsyncClient(base_url=sim_url, timeout=10) as http:
        response = await http.post(f"/sim/faults/dpus/{dpu}/error", json={"message": INJECTED})
    if response.status_code in (404, 409):  # the DPU is not recreated yet (or not in a phase to fail)
        return False
    response.raise_for_status()
    return True


def site_of(path: Path) -> dict[str, Any]:
    """The site file as a dict (the demo's hosts and their DPUs)."""
    loaded: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    return loaded
