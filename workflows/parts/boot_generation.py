"""A host's boot generation: the one rule, pure (no Temporal, no clock, no I/O).

**The generation moves exactly once per power cycle the BMC accepted** (or a reset a person
confirmed by hand, `host-rebooted` / `mark-rebooted`, or a reset the BMC showed since a reboot
became owed: DPF's `already_done`), whoever's operation it was and however the operation ended
(completed, failed, aborted, cancelled, its worker killed), **and never for a cycle the BMC
refused or that was never sent.**

Generation `n` of a host is the n-th such cycle. A power cycle happens in one of two places:

- a reboot (`reboot/<host>/generation-<n>`, `HostRebootWorkflow`): a `host reboot`, an
  operation's reboot round, a `host reset --host`, a firmware activation;
- a reset of the host and its DPUs (`host reset --both`, `--full`): its ForceOff ... On around
  the DPU resets, one cycle under the reset's own id.

The functions, each used where that decision is taken:

- `reached(asked, accepted)`: the generation a cycle for `asked` leaves the host at: `asked` once
  accepted, else the one before. A reboot's result and every early end's report, the reset's
  result: all say this number (and the `PowerCycleIssued` Event is written exactly when
  `accepted`, so the Event, `host status` and the result agree).
- `spent(asked, run)`: whether the reboot id of generation `asked` is used up: a run of it still
  runs (it may yet cycle), or one ended having reached it. A run that ended without reaching it
  (the BMC refused, it was aborted or cancelled before sending) leaves the generation free: the
  next cycle takes it again (`start_next_reboot`), so no number is skipped.
- `generation_after(known, reported)`: what the host's entity counts once an operation ended,
  from the generation its ending reported (its result, or its failure's details): it only moves
  up, and an ending that reports none (a removal; a run killed before any cycle) leaves it.
- `reached_by_runs(known, runs)`: an operation that ended cancelled or terminated reports
  nothing (Temporal keeps no result): the entity reads the reboot runs from `known + 1` on and
  counts each one that completed having reached its generation, up to the first that did not.
  (A `--both` reset's own cycle has no reboot run: cancelled after it, it is not counted.)
- `waits_for_a_person(workflow_id, seen)`: a reboot id held by a run that still waits for a
  person in manual-intervention-required (a reboot abandoned by a firmware run terminated by
  hand, the host OFF by its hand) is never queued behind: every later reboot of the host waits
  for it to end (`PreviousRebootRunning`), and it ends only when a person ends it. The start is
  refused instead, naming it and how to end it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, NamedTuple

from contracts.models.bmc_lease import RebootRunSeen
from contracts.models.host import MANUAL_INTERVENTION_REQUIRED


class RunEnd(StrEnum):
    """How a run holding a reboot id stands, as Temporal describes it."""

    RUNNING = "running"
    COMPLETED = "completed"  # its result says the generation reached
    FAILED = "failed"  # a reboot fails only before its cycle was accepted (the BMC refused)
    CANCELLED = "cancelled"  # a reboot cancelled after its cycle completes with its result instead
    TERMINATED = "terminated"  # cut by hand, anywhere: whether it cycled is unknown
    TIMED_OUT = "timed-out"  # as terminated


UNKNOWN_ENDS: Final = frozenset({RunEnd.TERMINATED, RunEnd.TIMED_OUT})


def reached(asked: int, accepted: bool) -> int:
    """The generation a cycle for `asked` leaves the host at: `asked` when the BMC accepted it
    (or a person confirmed the reset), else `asked - 1` (refused, never sent, cut before the
    BMC took it)."""
    return asked if accepted else asked - 1


def spent(asked: int, run: RunEnd, result_generation: int | None = None) -> bool:
    """Whether generation `asked`'s reboot id is used up by the run that holds it (`run`; a
    completed one's result says the generation it reached, `result_generation`). A run that may
    still cycle, or whose end does not say whether it did (terminated, timed out), counts as
    spent: a generation is skipped rather than counted twice."""
    if run == RunEnd.RUNNING or run in UNKNOWN_ENDS:
        return True
    if run == RunEnd.COMPLETED:
        return result_generation is None or result_generation >= asked
    return False  # failed or cancelled: it ended before the BMC took a cycle


def generation_after(known: int, reported: int | None) -> int:
    """The host's generation once an operation ended that reported `reported` (None: nothing)."""
    return known if reported is None else max(known, reported)


def reached_by_runs(known: int, runs: list[tuple[RunEnd, int | None]]) -> int:
    """The generation the reboot runs of generations `known + 1`, `known + 2`, ... (`runs`, in
    that order, as far as read) reached: each completed run that reached its own generation moves
    it on; the first that did not (or still runs, or ended unknown) ends the count."""
    for generation, (run, result) in enumerate(runs, start=known + 1):
        if run != RunEnd.COMPLETED or result is None or result < generation:
            break
        known = generation
    return known


class RebootLeft(NamedTuple):
    """A reboot run of an operation that ended by hand: its id and how it stands
    (`reboot_rounds.reached_when_ended`; read by `takeover_rules.off_when_cut`)."""

    workflow_id: str
    seen: RebootRunSeen


def waits_for_a_person(workflow_id: str, seen: RebootRunSeen) -> str:
    """The refusal of a new reboot whose generation `workflow_id` holds, still running and
    waiting for a person (`seen`), in words ("": none; the new reboot takes the next generation
    and waits for that run only while it may end on its own)."""
    if seen.end != RunEnd.RUNNING or seen.phase != MANUAL_INTERVENTION_REQUIRED:
        return ""
    return (
        f"{workflow_id} still runs and waits for a person ({seen.phase}; e.g. the reboot of a "
        "firmware run ended by hand, the host OFF by its hand): a new reboot of the host would wait "
        f"until it ends. End it first: `temporal workflow cancel --workflow-id {workflow_id}` (its "
        "cancel tries On afresh), then ask again"
    )
