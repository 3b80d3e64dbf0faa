"""What `metalflow campaign status` and `campaign start --wait` print, as pure functions of the
campaign's status or result (metalflow/cli/campaign.py runs the commands): the one status line,
the lines under it, the end's summary, and when `--wait` ends because the campaign waits for
nothing but an operator (`waits_for_operator`). No I/O but `print_named`'s printing.
"""

from __future__ import annotations

from collections.abc import Sequence

from contracts.models.campaign import CampaignResult, CampaignStatus, Failure
from contracts.wording import plural
from workflows.campaign.state import OPERATOR

BAR = 30
NAMED = 5  # hosts named after a count; more are counted (`+7 more`)


def _named(count: int, word: str, hosts: Sequence[str]) -> str:
    """`2 in flight (h-001, h-002)`: a count, and which hosts while there are any to name."""
    if not count or not hosts:
        return f"{count} {word}"
    shown = list(dict.fromkeys(hosts))[:NAMED]
    more = f", +{count - len(shown)} more" if count > len(shown) else ""
    return f"{count} {word} ({', '.join(shown)}{more})"


def render(status: CampaignStatus) -> str:
    """One line: phase, a bar, the counts with the hosts they are, what holds it."""
    finished = status.done + status.already_at_target + status.failed + status.skipped + status.aborted
    filled = BAR * finished // status.total if status.total else BAR
    waiting = status.awaiting_approval  # asked and held by their entity: in flight, not running yet
    aborted = [f.host_id for f in status.aborted_hosts]  # by the operator: not failures
    parts = [
        f"{status.done} done",
        f"{status.already_at_target} already at target",
        _named(len(status.in_flight), "in flight", status.in_flight),
        *([_named(len(waiting), "awaiting approval", waiting)] if waiting else []),
        _named(status.failed, "failed", [f.host_id for f in status.failures]),
        _named(status.skipped, "skipped", [f.host_id for f in status.skipped_hosts]),
        *([_named(status.aborted, "aborted", aborted)] if status.aborted else []),
        *([_deferred(status)] if status.deferred_count else []),
    ]
    line = (
        f"{status.name} {status.phase} [{'#' * filled}{'.' * (BAR - filled)}] {finished}/{status.total}: "
        f"{', '.join(parts)}; batch {status.batch}"
    )
    aborting = status.aborting and status.phase != "aborted" and f"aborting (asked by {status.aborting})"
    for why in (status.halted_reason, status.paused_by and f"paused by {status.paused_by}", aborting):
        if why:
            line += f"; {why}"
    if status.stopped_reason:
        line += f"; stopped: {status.stopped_reason}"
    if status.ended:
        line += f"; {status.ended}"
    return line


def _deferred(status: CampaignStatus) -> str:
    """`1 deferred (h-003 until 02:05:00Z)`: put off hosts, each with when it is asked again."""
    shown = [f"{d.host_id} {d.when()}" for d in status.deferred_hosts[:NAMED]]
    if not shown:  # a status from a worker that did not say when
        return _named(status.deferred_count, "deferred", status.deferred)
    more = f", +{status.deferred_count - len(shown)} more" if status.deferred_count > len(shown) else ""
    return f"{status.deferred_count} deferred ({', '.join(shown)}{more})"


def waits_for_operator(status: CampaignStatus) -> str | None:
    """What a campaign that can go no further without an operator waits for, in words (None: it
    goes on by itself): halted (its failure budget spent, a failed canary) or paused, nothing in
    flight. Nothing changes until someone answers, so `--wait` ends then instead of waiting in
    silence; the status line above it gives the halt's reason."""
    if status.waiting_on != OPERATOR:
        return None
    name = status.name
    if status.halted_reason is not None:
        verbs = ["retry-failed", *(["resume"] if "waiting for resume" in status.waiting_for else []), "abort"]
        how = "halted"
    else:
        verbs, how = ["resume", "abort"], f"paused by {status.paused_by or 'an operator'}"
    answers = " or ".join(f"`metalflow campaign {v} {name}`" for v in verbs)
    return f"campaign/{name} {how}: it still runs and starts no host until an operator answers with {answers}"


def print_named(word: str, count: int, named: tuple[Failure, ...], workflow_id: str) -> None:
    """The hosts named with their reason, and how many more the count holds."""
    for host in named:
        print(f"  {word} {host.host_id}: {host.reason}")
    if count > len(named):
        name = workflow_id.removeprefix("campaign/")
        print(f"  ... {count - len(named)} more {word}: `metalflow campaign hosts {name} --outcome {word}`")


def summary(result: CampaignResult) -> str:
    """The campaign's end in one line (hosts aborted by the operator are not counted failed)."""
    aborted = f", {result.aborted} aborted" if result.aborted else ""
    aborted += f", {result.deferred} deferred" if result.deferred else ""
    return (
        f"campaign/{result.name} {result.outcome}: {result.done} done, {result.already_at_target} already "
        f"at target, {result.failed} failed, {result.skipped} skipped{aborted} of {result.total}"
    )


def skipped_words(result: CampaignResult) -> str | None:
    """Why `--wait` of a campaign that skipped hosts and failed none exits 0 (`nothing_failed`),
    in words under the skipped hosts named; None when it skipped none, or something failed."""
    if not result.skipped or not result.nothing_failed:
        return None
    if result.done + result.already_at_target == 0:
        return (
            "  nothing to do: every host was skipped (named above, each with why: the campaign's rules "
            "or a person's word): no host's operation ran; not a failure (exit 0)"
        )
    return (
        f"  {plural(result.skipped, 'host')} skipped (named above, each with why: the campaign's rules "
        "or a person's word), every other one succeeded; not a failure (exit 0)"
    )


def details(status: CampaignStatus, workflow_id: str) -> list[str]:
    """The lines under the status line: what it waits for, the hosts behind the counts (failed,
    aborted with what each was left in, finishing a reboot round, put off until when), every
    change outside its hosts."""
    waiting = status.waiting_for and status.waiting_on != "ended"  # an end is said on the line above
    lines = [f"  waiting for: {status.waiting_on}: {status.waiting_for}"] if waiting else []
    if status.stopped_reason:
        lines.append(f"  stopped: {status.stopped_reason}")
    lines += _named_lines("failed", status.failed, status.failures, workflow_id)
    lines += _named_lines("aborted", status.aborted, status.aborted_hosts, workflow_id)
    lines += [f"  finishing {f.host_id}: {f.reason}" for f in status.finishing]
    for deferred in status.deferred_hosts:
        lines.append(f"  deferred {deferred.host_id} {deferred.when()}: {deferred.reason}")
    if status.deferred_count > len(status.deferred_hosts):
        more = status.deferred_count - len(status.deferred_hosts)
        name = workflow_id.removeprefix("campaign/")
        lines.append(f"  ... {more} more deferred: `metalflow campaign hosts {name} --outcome deferred`")
    lines += [f"  changed {change.describe()}" for change in status.changes]
    return lines


def _named_lines(word: str, count: int, named: tuple[Failure, ...], workflow_id: str) -> list[str]:
    lines = [f"  {word} {host.host_id}: {host.reason}" for host in named]
    if count > len(named):
        name = workflow_id.removeprefix("campaign/")
        lines.append(
            f"  ... {count - len(named)} more {word}: `metalflow campaign hosts {name} --outcome {word}`"
        )
    return lines
