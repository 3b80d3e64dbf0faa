"""What a host's entity must not lose with its run, and how a new entity takes it over (issue 40).

Continue-as-new carries the whole state; a run ended by hand (`temporal workflow terminate`, a
reset) carries nothing but its last memo. So the entity keeps in its memo (`names.CARRIED_MEMO`,
written when it changes) what must outlive the process holding it: the boot generation, the run
that left the host OFF (`left_off_by`), maintenance, an operator's hold on automation
(`automation_hold.py`), the instance the host is assigned to, the DPUs its removals took out of
DPF (`removed_from_dpf`: a reprovision of them is refused), and a request awaiting approval
(`awaiting`, whole: the new entity holds it awaiting as its predecessor did, `take_awaiting`; a
terminate lost it before, its requester, e.g. the monitor, still saying it awaited approval).
A new entity (no state handed to it) reads the last closed run of its workflow id once at its
start (`read_entity_predecessor`) and takes that entry over (`take_over`), saying so in its
status, memo and log. The boot generation follows its one rule
(`boot_generation.generation_after`: never back); what the new entity already knows (a start's
own generation, a request handled meanwhile) is kept.

The predecessor's operations are read in the same activity (one visibility list each):
- one still running (an entity terminated by hand abandons its child) is ADOPTED (`adopt`): the
  new entity is busy with it as with its own child (every request refused naming it; `host
  abort`/`retry`/`status`/`list` reach it) and records its end as an own child's (`outcome_of_run`,
  the OFF mark, the boot generation), so there is never a second operation on the host;
- one that closed after the predecessor last changed its phase (its `PhaseSince`: an entity
  records an end by going idle, so an end after it is one it never recorded, e.g. a reboot
  cancelled with it that then failed with the host OFF) is recorded in `recent`, and what it
  says of the host's power wins over the carried entry (`take_over`): the OFF mark names the run
  that really left the host OFF, or is cleared by a later run that says the host is on or
  reached a boot generation; an operator's no to the monitor's run (aborted, terminated) holds
  automation back as an own child's end does (`automation_hold.hold_after_run`).
Pure: no Temporal, no clock, no I/O.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final, NamedTuple

from pydantic import ValidationError

from contracts import names
from contracts.models.bmc_lease import RebootRunSeen
from contracts.models.host import (
    MANUAL_INTERVENTION_REQUIRED,
    AutomationHold,
    EntityPredecessor,
    HostEntityMemory,
    Maintenance,
    OperationRecord,
    OperationRequest,
    OperationRun,
    PendingOperation,
    RunEnd,
)
from contracts.wording import (
    CANCELLED_OUTCOME,
    CANCELLED_PHASE,
    aborted_outcome,
    cancel_left,
    is_completed,
    iso_z,
)
from workflows.host.automation_hold import hold_after_run
from workflows.parts.boot_generation import UNKNOWN_ENDS, RebootLeft, generation_after
from workflows.parts.host_power import HOST_IS_OFF, HOST_IS_ON, POWER_NOT_TOUCHED

RECENT_KEPT = 20  # as the entity's own `recent` (state.RECENT_LIMIT)
POWER_HOLDERS = (
    "reboot",
    "reset",
)  # operations that enter manual-intervention-required only with the host OFF


CUT_BY_HAND: Final = ("TERMINATED", "CANCELED")  # Temporal keeps no result: the run reported nothing
REBOOTING: Final = (
    names.PROVISION,
    names.REPROVISION,
    names.FIRMWARE,
    names.REBOOT,
    "reset",
)  # operations that power-cycle the host through its reboot runs (a removal does not)


class CutReboots(NamedTuple):
    """What the host's reboot runs said for `run` (a run cut by hand, found closed unrecorded):
    the generation they reached (None: unread) and the first that did not complete
    (`reboot_rounds.reached_by_reboots`, as for an own child or an adopted run cut short)."""

    run: OperationRun
    reached: int | None
    left: RebootLeft | None


def _unrecorded(memory: HostEntityMemory, ended: tuple[OperationRun, ...]) -> list[OperationRun]:
    """The closed runs `memory.recent` does not hold yet, oldest first."""
    return [
        run
        for run in ended
        if run.end is not None
        and not any(
            r.workflow_id == run.workflow_id and r.started_at == run.started_at for r in memory.recent
        )
    ]


def cut_to_read(memory: HostEntityMemory, before: EntityPredecessor) -> tuple[OperationRun, int] | None:
    """The run whose reboots a new entity reads before it takes over (`take_over`'s `reboots`):
    the last run the predecessor's read found closed unrecorded that was terminated or cancelled
    (no result, no report) and power-cycles the host (`REBOOTING`), with the generation to read
    from (what the entity knows with the carried entry). None: no such run, no read (an entity
    that adopts or records nothing else adds no activity). One read serves all: the reboot runs
    are the host's, and the last of them that did not complete is the last cut run's."""
    cut = [
        run
        for run in _unrecorded(memory, before.ended)
        if run.end is not None
        and run.end.status in CUT_BY_HAND
        and run.end.boot_generation is None
        and (run.operation or run.workflow_id.split("/", 1)[0]) in REBOOTING
    ]
    if not cut:
        return None
    entry = before.carried or {}
    return cut[-1], generation_after(memory.boot_generation, int(entry.get("boot_generation") or 0))


def carried(memory: HostEntityMemory) -> dict[str, Any]:
    """The memo entry that outlives the run: JSON-ready, compared to write it only when it changed."""
    return {
        "boot_generation": memory.boot_generation,
        "instance": memory.instance,
        "removed_from_dpf": dict(memory.removed_from_dpf),
        "left_off_by": memory.left_off_by,
        "maintenance": memory.maintenance.model_dump(mode="json") if memory.maintenance else None,
        "automation_held_back": (
            memory.automation_held_back.model_dump(mode="json") if memory.automation_held_back else None
        ),
        "awaiting": _awaiting(memory),
    }


def _awaiting(memory: HostEntityMemory) -> dict[str, Any] | None:
    """The request awaiting approval, whole (None: none awaits): a terminate must not lose it."""
    current = memory.current
    if current is None or current.approved or current.adopted_run:
        return None
    return current.model_dump(mode="json")


def take_awaiting(memory: HostEntityMemory, entry: dict[str, Any]) -> str:
    """The predecessor's request that awaited approval (`entry["awaiting"]`) awaits approval here
    as it did there (`approve`, `withdraw`, `host status` and the requester's own view all reach
    it; its approval timeout counts from its request, as before), unless this entity already has
    an operation (adopted: the predecessor never started two). Its words ("" nothing taken)."""
    awaiting = entry.get("awaiting")
    if not awaiting or memory.current is not None:
        return ""
    try:
        current = PendingOperation.model_validate(awaiting)
    except ValidationError:  # a newer entry this code cannot read: said, not guessed
        return "a request awaiting approval, not readable here: ask again"
    if current.approved or current.adopted_run:
        return ""
    memory.current = current
    return _still_awaiting(current.record)


def _still_awaiting(record: OperationRecord) -> str:
    return f"{record.operation} requested by {record.requested_by}, {STILL_AWAITING}"


STILL_AWAITING: Final = "still awaiting approval"


def no_longer_awaiting(taken_over: str, record: OperationRecord, what: str) -> str:
    """The "taken over" words once the request they say still awaits approval (`record`) was
    decided (`what`: `withdrawn by WHO...`, `expired: ...`, `approved by WHO`): `still awaiting
    approval` would be false then, so it reads `awaiting approval then: WHAT`; other words kept."""
    said = _still_awaiting(record)
    return taken_over.replace(
        said, f"{record.operation} requested by {record.requested_by}, awaiting approval then: {what}"
    )


def outcome_of_run(end: RunEnd) -> str:
    """How a run ended, in the entity's words, as an own child's (`outcome.ended_as`/`outcome_of`)."""
    if end.status == "COMPLETED":
        return aborted_outcome(end.aborted) if end.aborted else "completed"
    if end.status == "CANCELED":
        return CANCELLED_OUTCOME
    if end.status == "TERMINATED":
        return "terminated"
    if end.failure_type == "OperationAborted":
        return aborted_outcome(end.failure_message)
    return f"failed: {end.failure or end.status.lower()}"


def off_when_cut(
    outcome: str, operation: str, last_phase: str, host_id: str, reboot: RebootLeft | None = None
) -> str:
    """The outcome of an operation terminated by hand (`terminated`, which says nothing of the
    host's power: no code of the run ran after it), with what its last status and its last reboot
    said. The host was OFF by its hand when:

    - a reboot or reset's own last Phase was `manual-intervention-required` (they enter it only
      then: `PowerCustody.hand_over_words`);
    - its last reboot run (`reboot`: the first of the host's reboot runs after the known
      generation that did not complete, `reached_when_ended`) waits, or was cut, in
      `manual-intervention-required` (a reboot enters it only with the host OFF by its hand; a
      firmware run's reboot is abandoned with it and still waits), or failed saying the host is OFF
      (`BMCRebootFailed`: a reprovision's, provision's or reset's reboot that escalated; its
      operation then waited for a person with the host OFF).

    Then the outcome says the host is OFF, exactly as a run that ended saying so (the entity
    marks `left_off_by`). Anything else (a reboot still running that its parent's close cancels
    powers the host on itself or ends saying OFF; one that completed left it On) is returned as
    it was."""
    if outcome != "terminated":
        return outcome  # a cancelled run powers the host on itself first (`PowerCustody.cancelled`)
    power_on = f"power it on (`metalflow bmc power {host_id} on`)"
    if operation in POWER_HOLDERS and last_phase == MANUAL_INTERVENTION_REQUIRED:
        off = f"the host {host_id} {HOST_IS_OFF}: {power_on}"
        return f"terminated while the host was OFF ({last_phase}); {off}"
    if reboot is None:
        return outcome
    rid, seen = reboot
    if seen.phase == MANUAL_INTERVENTION_REQUIRED and seen.end in ("running", *UNKNOWN_ENDS):
        still = (
            f"; {rid} still waits for a person: `temporal workflow cancel --workflow-id {rid}` ends it "
            "(a cancel tries On afresh)"
            if seen.end == "running"
            else ""
        )
        return (
            f"terminated while its reboot {rid} waited for a person with the host OFF ({seen.phase}); "
            f"the host {host_id} {HOST_IS_OFF}: {power_on}{still}"
        )
    if seen.end == "failed" and HOST_IS_OFF in seen.said:
        return (
            f"terminated after its reboot {rid} failed leaving the host OFF; "
            f"the host {host_id} {HOST_IS_OFF}: {power_on}"
        )
    return outcome


WORDS_WHEN_TERMINATED: Final = (names.PROVISION, names.REPROVISION)  # their `status` says what they left


def cut_read(operation: str, outcome: str) -> bool | None:
    """Whether the entity reads the run of an operation whose end says it was cut by hand
    (`outcome_of`: cancelled or terminated; Temporal keeps no result), None: no read; True: for
    its words too (`reboot_rounds.cut_run`: one activity, the words one query in it). Cancelled,
    any operation: its final details say what it did and left, the host's power too
    (`said_when_cut`). Terminated: a reboot's or reset's last Phase (`off_when_cut`), a
    provision's or reprovision's words (its state replayed: its DPUs deleted, its power cycles).
    Every other end says its own words: no read."""
    if outcome == CANCELLED_OUTCOME:
        return True
    if outcome == "terminated" and operation in POWER_HOLDERS:
        return False
    if outcome == "terminated" and operation in WORDS_WHEN_TERMINATED:
        return True
    return None


def said_when_cut(
    outcome: str, operation: str, seen: RebootRunSeen | None, host_id: str, reboot: RebootLeft | None = None
) -> str:
    """The outcome of an operation cut by hand with what the read of its run (`seen`, `cut_read`;
    None: not read) and its last reboot (`reboot`) found:

    - cancelled: `cancelled (...). Done: ...; the host is on`: its own final words (a cancel
      carries none in Temporal), so `HostEntityState.finish` moves the OFF mark exactly as for any
      other end that says the host's power (issue 40: before, the record said only `cancelled
      (...)`, and a mark an earlier run left stayed on a host the cancel powered on);
    - terminated: `off_when_cut` (its last Phase, its last reboot), then what the run had done as
      its state replayed says it (`; as the run stood when terminated: ...`: a reprovision's DPUs
      deleted from DPF and its power cycles)."""
    said = seen.said if seen is not None else ""
    if outcome == CANCELLED_OUTCOME:
        left = cancel_left(said) if said.startswith(CANCELLED_PHASE) else ""
        return f"{outcome}. {left}" if left else outcome
    outcome = off_when_cut(outcome, operation, seen.phase if seen is not None else "", host_id, reboot)
    if said and outcome.startswith("terminated"):
        return f"{outcome}; as the run stood when terminated: {said}"
    return outcome


POWER_READ_AFTER_END: Final = REBOOTING  # the runs that can leave the host Off by their hand
MAYBE_OFF: Final = "may be OFF"  # an end whose power read was not answered (`outcome_after_read`)


def power_to_read(operation: str, outcome: str) -> bool:
    """Whether the entity reads the host's power once at the end of an operation (own child or
    adopted) before it records it: the run can power the host off (`POWER_READ_AFTER_END`: a
    reboot, a reset, a firmware run, a provision's or reprovision's reboot) and its end does not
    state the host's power, i.e. its own finaliser did not say it (terminated by hand, or any
    other end whose words say none of `HOST_IS_OFF`, `HOST_IS_ON`, `POWER_NOT_TOUCHED`). A completed
    run powered the host on (its reboots completed) and one that says OFF, on or not touched is
    believed: no read, so a run that ends as designed costs no BMC request more."""
    if operation not in POWER_READ_AFTER_END or is_completed(outcome):
        return False
    return not any(said in outcome for said in (HOST_IS_OFF, HOST_IS_ON, POWER_NOT_TOUCHED))


def outcome_after_read(
    outcome: str, run: str, host_id: str, power_state: str | None, unread: str = ""
) -> str:
    """The outcome of `run` (`power_to_read` said to read) with what the one read at its end found:
    Off -> it says the host is OFF in the words of every run that leaves it so (the entity then
    marks `left_off_by` = `run`: `host list` `(host OFF)`, the WARNING, a successor's mark);
    On (or powering on) -> as it was; not read (`power_state` None, `unread` why: the BMC did not
    answer) or any other state -> it says the host may be OFF, naming the run and the way to know."""
    if power_state in ("On", "PoweringOn"):
        return outcome
    power_on = f"power it on (`metalflow bmc power {host_id} on`)"
    if power_state == "Off":
        return f"{outcome}; read at its end: the host {host_id} {HOST_IS_OFF}: {power_on}"
    why = f"its power read {power_state}" if power_state else f"its power not read: {unread or 'no answer'}"
    return (
        f"{outcome}; the host {host_id} {MAYBE_OFF} after {run} ({why}): "
        f"`metalflow bmc power {host_id} status` says; if Off, {power_on}"
    )


def adopt(memory: HostEntityMemory, running: tuple[OperationRun, ...]) -> str:
    """The predecessor's operation still running becomes this entity's one operation (in flight,
    followed to its end); the words ("" none runs). Two running (never by this entity's rules)
    adopt the oldest and name the other."""
    if not running or memory.current is not None:
        return ""
    run, *others = sorted(running, key=lambda r: iso_z(r.started_at, none=""))
    host = run.workflow_id.split("/")[1] if run.workflow_id.count("/") else ""
    # The run's input keeps no `campaign_workflow_id`: the monitor asks in its own name, so its
    # request is rebuilt as it asked it (an operator's abort of it then holds automation back,
    # `automation_hold.hold_after`, and the monitor is told its end, as of an own child's).
    monitor = names.monitor_workflow_id(host) if host else ""
    asked_by = run.requested_by if monitor and run.requested_by == monitor else None
    try:
        request = OperationRequest(
            requested_by=run.requested_by or "unknown", reason=run.reason, campaign_workflow_id=asked_by
        )
    except ValidationError:  # a run started by hand with odd words: who asked is not known
        request = OperationRequest(requested_by="unknown")
    record = OperationRecord(
        operation=run.operation or run.workflow_id.split("/", 1)[0],
        workflow_id=run.workflow_id,
        requested_by=request.requested_by,
        outcome="running",
        started_at=run.started_at,
        requested_at=run.started_at,
        reason=request.reason,
        approved_by="its previous entity",
    )
    memory.current = PendingOperation(record=record, request=request, approved=True, adopted_run=run.run_id)
    also = f" (also running: {', '.join(o.workflow_id for o in others)})" if others else ""
    return f"adopted {run.workflow_id}, still running{also}"


def _reached(run: OperationRun) -> int | None:
    """The boot generation a closed run reached: its own report, else a completed reboot's id."""
    end = run.end
    if end is None:
        return None
    if end.boot_generation is not None:
        return end.boot_generation
    if end.status == "COMPLETED" and run.workflow_id.startswith(f"{names.REBOOT}/"):
        tail = run.workflow_id.rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else None
    return None


def _record_ended(
    memory: HostEntityMemory,
    ended: tuple[OperationRun, ...],
    now: datetime | None = None,
    reboots: CutReboots | None = None,
) -> list[str]:
    """The runs that closed after the predecessor's last recorded end, oldest first: each
    recorded in `recent`; each moves the boot generation (never back) and the OFF mark (it says
    OFF: marked by it; it says on or booted: cleared); an operator's abort of the monitor's
    request holds automation back, as an own child's end does (`hold_after_run`; since its
    close). The run cut by hand whose reboots were read (`reboots`, `cut_to_read`) takes what
    they reached and says the host is OFF when its last reboot left it so (`off_when_cut`). The
    words of each."""
    said = []
    for run in _unrecorded(memory, ended):
        if run.end is None:  # `_unrecorded` keeps closed runs only
            continue
        operation = run.operation or run.workflow_id.split("/", 1)[0]
        host = run.workflow_id.split("/")[1] if run.workflow_id.count("/") else ""
        read = reboots if reboots is not None and reboots.run == run else None
        left = read.left if read is not None else None
        outcome = off_when_cut(outcome_of_run(run.end), operation, run.end.last_phase, host, left)
        memory.recent.append(
            OperationRecord(
                operation=operation,
                workflow_id=run.workflow_id,
                requested_by=run.requested_by or "unknown",
                outcome=outcome,
                started_at=run.started_at,
                finished_at=run.end.closed_at,
                requested_at=run.started_at,
                reason=run.reason,
            )
        )
        del memory.recent[:-RECENT_KEPT]
        before = memory.boot_generation
        memory.boot_generation = generation_after(before, _reached(run))
        if read is not None:
            memory.boot_generation = generation_after(memory.boot_generation, read.reached)
        if HOST_IS_OFF in outcome:
            memory.left_off_by = run.workflow_id
        elif HOST_IS_ON in outcome or memory.boot_generation > before:
            memory.left_off_by = ""
        when = f" at {iso_z(run.end.closed_at)}" if run.end.closed_at else ""
        said.append(f"{run.workflow_id} ended{when}, unrecorded: {outcome}")
        since = run.end.closed_at or now
        hold = (
            hold_after_run(host, run.workflow_id, run.requested_by, outcome, since)
            if since is not None and host
            else None
        )
        if hold is not None:
            memory.automation_held_back = hold
            said.append(f"automation held back by {hold.by}")
    return said


def take_over(
    memory: HostEntityMemory,
    before: EntityPredecessor,
    now: datetime | None = None,
    reboots: CutReboots | None = None,
) -> str:
    """Take over what the predecessor's memo carried, in words ("" nothing to take: no closed
    run, or one that carried nothing, e.g. older code), saying when (`now`); adopt its operation
    still running; record its operations that closed unrecorded (a cut run's with what its
    reboots said, `reboots`: read for the run `cut_to_read` names). Never moves the boot generation
    back and never replaces what this entity already holds. The words are shown until a later
    operation of this entity completes, or the one it adopted ends however it ends
    (`HostEntityState.finish`): what they reported is past by then."""
    entry = before.carried or {}
    taken = []
    generation = int(entry.get("boot_generation") or 0)
    if generation > memory.boot_generation:
        memory.boot_generation = generation_after(memory.boot_generation, generation)
        taken.append(f"boot generation {memory.boot_generation}")
    if entry.get("instance") and memory.instance is None:
        memory.instance = str(entry["instance"])
        taken.append(f"instance {memory.instance}")
    removed = {
        str(dpu): str(by)
        for dpu, by in dict(entry.get("removed_from_dpf") or {}).items()
        if dpu not in memory.removed_from_dpf
    }
    if removed:
        memory.removed_from_dpf.update(removed)
        taken.append(f"removed from DPF: {', '.join(sorted(d or 'the DPU node' for d in removed))}")
    had_off = memory.left_off_by
    if entry.get("left_off_by") and not memory.left_off_by:
        memory.left_off_by = str(entry["left_off_by"])
    # After the entry: what happened since wins.
    taken.extend(_record_ended(memory, before.ended, now, reboots))
    if memory.left_off_by and memory.left_off_by != had_off:
        taken.append(f"the host is OFF as {memory.left_off_by} left it")
    if entry.get("maintenance") and memory.maintenance is None:
        memory.maintenance = Maintenance.model_validate(entry["maintenance"])
        taken.append(f"maintenance by {memory.maintenance.by}: {memory.maintenance.reason}")
    if entry.get("automation_held_back") and memory.automation_held_back is None:
        memory.automation_held_back = AutomationHold.model_validate(entry["automation_held_back"])
        taken.append(f"automation held back by {memory.automation_held_back.by}")
    adopted = adopt(memory, before.running)
    if adopted:
        taken.append(adopted)
    awaiting = take_awaiting(memory, entry)
    if awaiting:
        taken.append(awaiting)
    if not taken:
        return ""
    closed = f" at {iso_z(before.closed_at)}" if before.closed_at else ""
    how = f"{before.status.lower() or 'closed'}{closed}"
    at = f" at {iso_z(now)}" if now else ""
    source = f"run {before.run_id} ({how})" if before.run_id else "no closed run"
    memory.taken_over = f"took over from {source}{at}: {'; '.join(taken)}"
    return memory.taken_over


def awaiting_while_no_entity(entry: Any, host_id: str) -> str:
    """`; its request REQUEST awaits approval ...` when the ended entity's carried memo entry
    (`entry`) holds a request awaiting approval (the next entity takes it over, `take_awaiting`),
    else "": what `host status` says of it while no entity runs. Before: nothing, although the
    next `host status` showed it awaiting approval."""
    awaiting = entry.get("awaiting") if isinstance(entry, dict) else None
    if not awaiting:
        return ""
    try:
        current = PendingOperation.model_validate(awaiting)
    except ValidationError:
        return "; it held a request awaiting approval, not readable here"
    if current.approved or current.adopted_run:
        return ""
    record = current.record
    why = f": {record.reason}" if record.reason else ""
    return (
        f"; its request {record.workflow_id} ({record.operation} requested by {record.requested_by}{why}) "
        f"awaits approval: the next entity holds it so (`metalflow approve {host_id}` starts it, "
        f"`metalflow host abort {host_id}` withdraws it)"
    )


def left_running_words(workflow_id: str, operation: str, phase: str, host_id: str) -> str:
    """An operation still running whose entity ended (`host status` with no entity), in words:
    `ID (PHASE)`, and for a reboot or reset waiting in `manual-intervention-required` (a phase they
    enter only with the host OFF by their hand: `POWER_HOLDERS`) that the host is OFF and how it is
    powered on. Before: only "(manual-intervention-required) still runs", not a word of the power."""
    if operation in POWER_HOLDERS and phase == MANUAL_INTERVENTION_REQUIRED:
        return (
            f"{workflow_id} ({phase}: the host {host_id} {HOST_IS_OFF} by its hand and it waits for a "
            f"person; `metalflow host retry {host_id}` powers it on)"
        )
    return f"{workflow_id} ({phase or 'starting'})"


def off_while_no_entity(before: EntityPredecessor) -> str:
    """The run a new entity would mark as having left the host OFF (`take_over` on nothing
    known), "" none: what `host status` says while no entity runs (its entity terminated by
    hand), read from what the CLI can read without starting anything (the closed entity run's
    memo, the operations that closed since, as listed: no reboot run read)."""
    memory = HostEntityMemory()
    take_over(memory, before)
    return memory.left_off_by


def no_longer_off(taken_over: str, run: str, why: str) -> str:
    """The "taken over" words once the OFF mark they name (`run`) is cleared (`why`): their
    `the host is OFF as RUN left it` would contradict the mark (and the WARNING that went), so it
    reads `the host was OFF as RUN left it (no longer: WHY)`, and a quoted run's `the host H is OFF:
    power it on (...)` reads `the host H was OFF then`; other words are kept as they were."""
    said = f"the host is OFF as {run} left it"
    words = taken_over.replace(said, f"the host was OFF as {run} left it (no longer: {why})")
    # A run's own words quoted in them (`off_when_cut`'s) advise powering on: past too.
    return _POWER_IT_ON.sub(r"the host \1 was OFF then", words)


_POWER_IT_ON: Final = re.compile(
    rf"the host (\S+) {HOST_IS_OFF}: power it on \(`metalflow bmc power \S+ on`\)"
)
