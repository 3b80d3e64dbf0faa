"""A campaign recognises its own earlier ask of a host by its request id, not by the requester's
words: an attempt of `request_campaign_hosts` retried after the entity took the request reports
that operation (the host is not asked twice), a host put off and asked again under the same id
finds its operation, while another campaign asking in the same words (a later campaign of the
same name) and a `retry_failed` re-ask (a new id) are never mistaken for it.

Real: the host entity (it records the request id with the operation), the campaign activity (run
through `ActivityEnvironment` as an attempt of the worker's queue), the dev server. Stand-in: the
operation (`GatedOperation`: runs until aborted).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path

from campaign_support import GatedOperation, campaign_worker, write_site
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.campaign import CampaignActivities
from contracts import names
from contracts.models.campaign import (
    CampaignTarget,
    HostRequestInput,
    HostRequestOutcome,
    HostRequestsInput,
    TargetKind,
)
from contracts.models.control import ABORT_UPDATE, STATUS_QUERY, OperatorAnswer, OperatorRequest
from contracts.models.host import HostStatus
from contracts.with_start import execute_update
from drivers.inventory import Inventory
from drivers.kube import Kube
from drivers.settings import Settings

WORDS = "campaign fleet (ops@dc)"  # what the entity shows as the requester, for people


def _ask(host: str, request_id: str) -> HostRequestInput:
    return HostRequestInput(
        host_id=host,
        target=CampaignTarget(kind=TargetKind.REPROVISION),
        campaign="fleet",
        campaign_workflow_id="campaign/fleet",
        request_id=request_id,
        requested_by=WORDS,
    )


async def _status(client: Client, host: str) -> HostStatus:
    status: HostStatus = await client.get_workflow_handle(names.host_workflow_id(host)).query(
        STATUS_QUERY, result_type=HostStatus
    )
    return status


async def test_an_ask_is_recognised_by_its_request_id_never_by_its_words(
    local_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = local_env.client
    host = f"crq{uuid.uuid4().hex[:4]}-a"
    queue = f"test-campaign-requests-{uuid.uuid4()}"
    site = write_site(tmp_path, [host])
    first, later = "campaign/fleet@run-1", "campaign/fleet@run-2"  # two campaigns of one name
    async with campaign_worker(client, queue, site, [GatedOperation]):
        settings = Settings(site_file=site, inventory="site")
        kube = Kube(settings)
        activities = CampaignActivities(Inventory(settings, kube), kube, client)

        async def attempt(number: int, request_id: str) -> HostRequestOutcome:
            env = ActivityEnvironment(client)
            env.info = dataclasses.replace(env.info, task_queue=queue, attempt=number)
            asked = HostRequestsInput(requests=(_ask(host, request_id),))
            [outcome] = (await env.run(activities.request_campaign_hosts, asked)).outcomes
            return outcome

        taken = await attempt(1, f"{first}/{host}#0")
        assert (taken.outcome, taken.workflow_id) == ("started", names.reprovision_workflow_id(host)), taken
        status = await _status(client, host)
        assert status.current is not None and status.current.request_id == f"{first}/{host}#0"

        # The attempt is retried after the entity took the request: its operation, not a second ask.
        again = await attempt(2, f"{first}/{host}#0")
        assert (again.outcome, again.workflow_id, again.message) == (
            "started", taken.workflow_id, "asked by an earlier attempt",
        )  # fmt: skip
        # The host put off (its ask unanswered) and asked again under the same id: busy with its own.
        own = await attempt(1, f"{first}/{host}#0")
        assert (own.outcome, own.workflow_id) == ("started", taken.workflow_id), own

        # Another campaign in the same words, first and retried attempts: the host is busy, not its.
        for number in (1, 2):
            other = await attempt(number, f"{later}/{host}#0")
            assert other.outcome == "busy" and not other.workflow_id, other
        status = await _status(client, host)
        assert status.current is not None and status.current.workflow_id == taken.workflow_id
        assert status.recent == (), "asked once"

        # Its operation ends (aborted); a retry_failed re-ask (a new id) is a new request, even on
        # a retried attempt that finds the ended operation among the entity's records.
        operation = client.get_workflow_handle(taken.workflow_id)
        await execute_update(
            operation, ABORT_UPDATE, OperatorRequest(requested_by="test"), result_type=OperatorAnswer
        )
        for _ in range(100):
            status = await _status(client, host)
            if status.current is None:
                break
            await asyncio.sleep(0.1)
        assert status.current is None and [r.request_id for r in status.recent] == [f"{first}/{host}#0"]
        retried = await attempt(2, f"{first}/{host}#1")
        assert retried.outcome == "started" and retried.message != "asked by an earlier attempt", retried
        status = await _status(client, host)
        assert status.current is not None and status.current.request_id == f"{first}/{host}#1"
        await execute_update(
            client.get_workflow_handle(status.current.workflow_id),
            ABORT_UPDATE,
            OperatorRequest(requested_by="test"),
            result_type=OperatorAnswer,
        )
    await client.get_workflow_handle(names.host_workflow_id(host)).terminate("test over")
