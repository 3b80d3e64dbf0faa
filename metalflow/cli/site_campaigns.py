"""After `metalflow site check` kept its findings: tell the running campaigns (issue 36).

A campaign's admission leaves out the hosts the kept check blocks its kind's operation on
(`campaign_blocks`), at `plan`, `start` and the run's start alike; a check made while it runs is
held to the same rule by the campaign's `site_blocked` update: each running campaign (a visibility
query by its search attributes, `Operation = campaign`) is sent what the new check blocks, for
every per-host operation a campaign asks (`SiteBlockedRequest`: each takes its own), and skips the
hosts it has not started, naming the finding; a host already running is named and runs on (a
check cannot stop it). Only the findings the campaigns consult (those of the site in use) are
sent. Temporal unreachable, or a campaign that does not answer within `TELL_SECONDS`: said on
stderr, the check's exit status unchanged.

Cost: one visibility list and one update per running campaign, only when a check is kept.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from metalflow.hosts import default_operator

if TYPE_CHECKING:
    from contracts.models.campaign import SiteBlocks

TELL_SECONDS = 10.0  # the whole telling: connect, list, one update per running campaign


def blocks(path: Path) -> tuple[SiteBlocks, ...]:
    """What the check kept at `path` blocks, per per-host operation and reboot method."""
    from contracts.models.campaign import SiteBlocks
    from contracts.models.campaign_target import RequestedOperation
    from metalflow.site_check import campaign_blocks

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
    client = await connect_to(resolve(args))
    query = f'{names.OPERATION.name} = "{names.CAMPAIGN_OPERATION}" AND ExecutionStatus = "Running"'
    lines = []
    async for execution in client.list_workflows(query):
        handle = client.get_workflow_handle(execution.id)
        try:
            answer = await handle.execute_update(SITE_BLOCKED_UPDATE, request, result_type=OperatorAnswer)
        except Exception as err:  # ended meanwhile, or refused: the others are still told
            lines.append(f"campaign {execution.id} was not told ({type(err).__name__}: {str(err)[:200]})")
            continue
        lines.append(f"told campaign {execution.id}: {answer.message}")
    return lines


def tell_running_campaigns(args: argparse.Namespace, path: Path) -> list[str]:
    """The lines to say on stderr: what each running campaign did with the kept check at `path`,
    or that they were not told, and why."""
    from metalflow.site_check import findings_path

    if path.absolute() != findings_path().absolute():
        return [f"running campaigns were not told: {path} are not the findings of the site in use"]
    try:
        return asyncio.run(asyncio.wait_for(_tell(args, path), TELL_SECONDS))
    except Exception as err:  # Temporal unreachable or slow, a campaign that refused: the check stands
        return [f"running campaigns were not told ({type(err).__name__}: {str(err)[:200]})"]
