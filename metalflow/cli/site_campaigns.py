"""After `metalflow site check` kept its findings: tell the running campaigns (issue 36).

A campaign's admission leaves out the hosts the kept check blocks its kind's operation on
(`campaign_blocks`), at `plan`, `start` and the run's start alike; a check made while it runs is
held to the same rule by the campaign's `site_blocked` update: each running campaign (a visibility
query by its search attributes, `Operation = campaign`) is sent what the new check blocks, for
every per-host operation a campaign asks (`SiteBlockedRequest`: each takes its own), and skips the
hosts it has not started, naming the finding; a host already running is named and runs on (a
check cannot stop it). Only the findings the campaigns consult (those of the site in use) are
sent. Temporal unreachable: said on stderr (`running campaigns were not told`); a campaign that
does not answer within `TELL_SECONDS` (no worker) is named, its outcome unknown (the update may
apply once a worker runs it), the others are told; the check's exit status is unchanged either
way. `--json` records which were told, not told, and unknown (`campaigns`).

Cost: one visibility list and one update per running campaign, only when a check is kept.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from metalflow.hosts import default_operator

if TYPE_CHECKING:
    from temporalio.client import Client

    from contracts.models.campaign import SiteBlocks

TELL_SECONDS = 10.0  # each of: connect, list, and each campaign's update (sent at once)
# What became of each running campaign (`--json`'s `campaigns`): told (its answer), not told
# (refused, ended, Temporal unreachable), unknown (no answer in time: it may still apply).
TOLD, NOT_TOLD, UNKNOWN = "told", "not_told", "unknown"


@dataclass(frozen=True)
class Told:
    outcome: str  # TOLD, NOT_TOLD or UNKNOWN
    workflow_id: str  # "" for all of them (Temporal unreachable)
    line: str  # said on stderr


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


async def _tell(args: argparse.Namespace, path: Path) -> list[Told]:
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

    async def tell(workflow_id: str) -> Told:
        handle = client.get_workflow_handle(workflow_id)
        try:  # each on its own clock: a campaign no worker serves does not keep the others untold
            answer = await asyncio.wait_for(
                handle.execute_update(SITE_BLOCKED_UPDATE, request, result_type=OperatorAnswer), TELL_SECONDS
            )
        except Exception as err:  # ended meanwhile, refused, no worker: the others are still told
            return not_told(workflow_id, err)
        return Told(TOLD, workflow_id, f"told campaign {workflow_id}: {answer.message}")

    return list(await asyncio.gather(*(tell(w) for w in running)))


def not_told(workflow_id: str, err: BaseException) -> Told:
    """A campaign the update did not answer: refused or gone (not told), or unanswered in time (a
    timeout: the update may be applied later, once a worker runs the campaign: unknown)."""
    from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError

    name = workflow_id.removeprefix("campaign/")
    if isinstance(err, (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError)):
        return Told(
            UNKNOWN,
            workflow_id,
            f"campaign {workflow_id} did not answer within {TELL_SECONDS:g} s (no worker runs it?): whether "
            "it skips the hosts is unknown, the update may apply once a worker runs it; see `metalflow "
            f"campaign hosts {name}`",
        )
    return Told(
        NOT_TOLD, workflow_id, f"campaign {workflow_id} was not told ({cut(type(err).__name__, err)})"
    )


def cut(kind: str, err: BaseException, chars: int = 200) -> str:
    """An error's kind and first line, cut at a word (never mid-word) when long."""
    line = (str(err).splitlines() or [""])[0]
    if len(line) > chars:
        line = line[:chars].rsplit(" ", 1)[0] + " ..."
    return f"{kind}: {line}" if line else kind


async def _listed(client: Client, query: str) -> list[str]:
    return [execution.id async for execution in client.list_workflows(query)]


def tell_running_campaigns(args: argparse.Namespace, path: Path) -> list[Told]:
    """What each running campaign did with the kept check at `path` (each with its line to say on
    stderr), or that they were not told, and why."""
    from metalflow.site_check import findings_path

    if not any(b.groups for b in blocks(path)):
        return []  # it blocks no host: nothing to tell (no Temporal asked)
    if path.absolute() != findings_path().absolute():
        return [
            Told(
                NOT_TOLD,
                "",
                f"running campaigns were not told: {path} are not the findings of the site in use",
            )
        ]
    try:
        return asyncio.run(_tell(args, path))
    except Exception as err:  # Temporal unreachable or slow, a campaign that refused: the check stands
        return [Told(NOT_TOLD, "", f"running campaigns were not told ({cut(type(err).__name__, err)})")]


def as_json(told: list[Told]) -> dict[str, list[str]]:
    """`--json`'s `campaigns`: the workflow ids told, not told and unknown ("" : all of them)."""
    return {kind: [t.workflow_id for t in told if t.outcome == kind] for kind in (TOLD, NOT_TOLD, UNKNOWN)}
