"""After `metalflow site check` kept its findings: tell the running campaigns (issue 36).

A campaign's admission leaves out the hosts the kept check blocks its kind's operation on
(`campaign_blocks`), at `plan`, `start` and the run's start alike; a check made while it runs is
held to the same rule by the campaign's `site_blocked` update: each running campaign (a visibility
query by its search attributes, `Operation = campaign`) is sent what the new check blocks, for
every per-host operation a campaign asks (`SiteBlockedRequest`: each takes its own), and skips the
hosts it has not started, naming the finding; a host already running is named and runs on (a
check cannot stop it). Only the findings the campaigns consult (those of the site in use) are
sent. Temporal unreachable: said on stderr (`running campaigns were not told`); a campaign that
does not answer within `TELL_SECONDS` (no worker) is named as not told, the others are; the
check's exit status is unchanged either way.

Cost: one visibility list and one update per running campaign, only when a check is kept.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from metalflow.hosts import default_operator

if TYPE_CHECKING:
    from temporalio.client import Client

    from contracts.models.campaign import SiteBlocks

TELL_SECONDS = 10.0  # each of: connect, list, and each campaign's update (sent at once)


def blocks(path: Path) -> tuple[SiteBlocks, ...]:
    """What the check kept at `path` blocks, per per-host operation and reboot method."""
    from contracts.models.campaign import SiteBlocks
    from contracts.models.campaign_target import RequestedOperation
    from metalflow.site_groups import campaign_blocks

    return tuple(
        SiteBlocks(
            request=request, manual_reboot=manual, groups=campaign_blocks(request, path, manual_reboot=manual)
        )
        for request in get_args(RequestedOperation)
        for manual in (False, True)
    )


async def _tell(args: argparse.Namespace, path: Path) -> list[str]:
    from contracts import names
    from contracts.models.campaign import SITE_BLOCKED_UPDATE, SiteBlockedRequest
    from contracts.models.control import OperatorAnswer
    from metalflow.cli.connection import connect_to, resolve

    request = SiteBlockedRequest(
        requested_by=default_operator(),
        reason=f"metalflow site check (kept in {path})",
        blocks=blocks(path),
    )
    client = await asyncio.wait_for(connect_to(resolve(args)), TELL_SECONDS)
    query = f'{names.OPERATION.name} = "{names.CAMPAIGN_OPERATION}" AND ExecutionStatus = "Running"'
    running = await asyncio.wait_for(_listed(client, query), TELL_SECONDS)

    async def tell(workflow_id: str) -> str:
        handle = client.get_workflow_handle(workflow_id)
        try:  # each on its own clock: a campaign no worker serves does not keep the others untold
            answer = await asyncio.wait_for(
                handle.execute_update(SITE_BLOCKED_UPDATE, request, result_type=OperatorAnswer), TELL_SECONDS
            )
        except Exception as err:  # ended meanwhile, refused, no worker: the others are still told
            return f"campaign {workflow_id} was not told ({type(err).__name__}: {str(err)[:200]})"
        return f"told campaign {workflow_id}: {answer.message}"

    return list(await asyncio.gather(*(tell(w) for w in running)))


async def _listed(client: Client, query: str) -> list[str]:
    return [execution.id async for execution in client.list_workflows(query)]


def tell_running_campaigns(args: argparse.Namespace, path: Path) -> list[str]:
    """The lines to say on stderr: what each running campaign did with the kept check at `path`,
    or that they were not told, and why."""
    from metalflow.site_check import findings_path

    if not any(b.groups for b in blocks(path)):
        return []  # it blocks no host: nothing to tell (no Temporal asked)
    if path.absolute() != findings_path().absolute():
        return [f"running campaigns were not told: {path} are not the findings of the site in use"]
    try:
        return asyncio.run(_tell(args, path))
    except Exception as err:  # Temporal unreachable or slow, a campaign that refused: the check stands
        return [f"running campaigns were not told ({type(err).__name__}: {str(err)[:200]})"]
