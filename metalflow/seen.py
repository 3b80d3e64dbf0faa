"""Where an operation is, in the CLI's words (`Seen`): an operation's status read as running
(`as_running`), and a workflow without a status query (a reboot) read from its Phase and current
details (`seen_without_status`). Pure: `metalflow.hosts` asks Temporal and calls these."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from contracts.host_requests import ENTITY_REQUESTS
from contracts.models.redfish import PowerCycleProgress
from contracts.secret_free import secret_free
from contracts.wording import iso_z
from workflows.host_reboot.failure import power_down_off_since
from workflows.parts.bmc_lease_holder import queued_words

DONE_PHASES = tuple(dict.fromkeys(("completed", *(kind.ended for kind in ENTITY_REQUESTS))))
"""Final phases of a run that did what it was asked (`completed`; a firmware run's `done`)."""
ENDED_PHASES = (*DONE_PHASES, "failed", "aborted", "cancelled", "stopped")  # `kernel.Runbook.ENDED`
FINISHING = "finishing"


def as_running(status: dict[str, Any]) -> dict[str, Any]:
    """The `status` of an operation its host still records as running, for a "now": a runbook
    that reached its final phase (`completed` and what it did) has not closed its run, or its
    host has not recorded the end (a query answered while the worker was down or catching up
    replays the run's pending task too); "now completed" said of a running operation misled,
    so it reads `finishing`, waiting for its run to close, with what its runbook said.
    Cost: none (the same status)."""
    phase = str(status.get("phase") or "")
    if phase not in ENDED_PHASES:
        return status
    said = str(status.get("waiting_for") or "")
    words = said if phase in DONE_PHASES else f"{phase}: {said}".rstrip(": ")
    waiting = "its run to close and its host to record the end" + (f" ({words})" if words else "")
    return {**status, "phase": FINISHING, "waiting_for": waiting}


@dataclass(frozen=True)
class Seen:
    """Where an operation is, for a person: its phase line and what it waits for."""

    text: str  # the phase, the DPUs' phases, power cycles
    waiting_for: str = ""
    milestone: str = ""  # what makes a step: the phase and the power cycles (not DPU phases)
    details: str = ""  # the workflow's current details (what the UI shows), when it has no status
    phase: str = ""
    since: datetime | None = None  # when its wait began, when the workflow says (a power-down wait)
    partial: bool = False  # its details could not be read (no worker answered): the phase alone
    trouble: str = ""  # its power cycle's BMC does not answer, or it is retried (`power_cycle_trouble`)


# Phases of a reboot (HostRebootWorkflow has no status query): what each waits for, in words.
_QUEUED = "waiting for a slot of the BMC's lease "
_REBOOT_WAITS = {
    # said for every BMC: one with PowerCycle cycles itself, one without takes ForceOff then On
    # (issue 38: "the BMC's power cycle" read wrong for a BMC without PowerCycle)
    "powering": "the power cycle of {host} (its BMC's PowerCycle, or ForceOff then On)",
    "waiting-for-manual-reboot": "`metalflow host-rebooted {host}` (someone reboots {host} by hand)",
}


_POWER_DOWN_WAIT = "power-down wait: "  # the reboot's details during its durable Off-to-On timer


def _manual_reboot_words(waiting: str, details: str, host_id: str) -> str:
    """What a reboot waiting for a person waits for, with why and the host's power, in one line
    (attack 41a MEDIUM-4: the words alone hid both): its details read `{why}; reboot H and send
    the signal ... (`metalflow host-rebooted H`)[, or fix the BMC and `metalflow host retry H`]`
    (workflows/host_reboot/workflow.py `_wait_for_manual_reboot`). A host it left off waits in
    `manual-intervention-required` instead, whose words say "is OFF": here it is not."""
    why, ask, rest = details.partition(f"; reboot {host_id} and send the signal ")
    if not ask or not why:
        return waiting
    retry = f", or fix the BMC and `metalflow host retry {host_id}`"
    offered = retry if rest.endswith(retry) else ""
    return f"{waiting}{offered}: {secret_free(why)}; {host_id} is not off by this reboot's hand"


def seen_without_status(shown: str, current_details: str | None, host_id: str) -> Seen:
    """Where a workflow without a `status` query (a reboot) is, from its Phase and its current
    details as the UI shows them (`**PHASE**: DETAILS`; None: not read), in the CLI's words:
    - the details' `**PHASE**: ` prefix is dropped, whichever phase it names (a details line set
      within another phase, or read across a worker restart, never reaches the CLI in the UI's
      format);
    - a final phase (`rebooted`, `failed`, ...) reads `finishing` as `as_running` says it for an
      operation with a status (a query answered by a worker catching up after a restart replays
      the run's last task: its final phase showed before the run closed, as a stray UI line);
    - its power-down wait says since when: the Off time in its words (`since`), not when the
      CLI first saw it (a `--wait` that saw it after a worker restart re-anchored it there);
    - details not read (`partial`): the phase alone, which a follower does not take over a full
      reading it already has (a killed worker's query timing out changed the wait's words)."""
    details = current_details or ""
    if details.startswith("**") and "**: " in details:
        details = details.split("**: ", 1)[1]
    if shown in ENDED_PHASES:
        ended = as_running({"phase": shown, "waiting_for": details})
        waiting = str(ended["waiting_for"])
        partial = current_details is None
        return Seen(
            FINISHING, waiting, milestone=FINISHING, details=details, phase=FINISHING, partial=partial
        )
    waiting = _REBOOT_WAITS.get(shown, "").format(host=host_id)
    if shown == "waiting-for-manual-reboot":
        waiting = _manual_reboot_words(waiting, details, host_id)
    since = None
    if details.startswith(_POWER_DOWN_WAIT):  # a BMC without PowerCycle: Off, the wait, On
        waiting, since = details, power_down_off_since(details)
    queued = details.partition(_QUEUED)[2].strip()  # `BMCLeaseHolder.hold`'s details while queued
    if queued:
        waiting = queued_words(queued, host_id)
    text = shown + (f": {details}" if details and not waiting else "")
    # The power-down wait beginning is a step (a lasting line, as an operation's reboot shows it):
    # within `powering` it was only a detail, which `--wait`'s log never printed.
    milestone = text + (" " + _POWER_DOWN_WAIT if details.startswith(_POWER_DOWN_WAIT) else "")
    return Seen(text, waiting, milestone=milestone, details=details, phase=shown, since=since,
                partial=current_details is None)  # fmt: skip


_TROUBLE = "power-cycle-trouble"  # in a milestone: its beginning and end are steps (lasting lines)
BMC_TROUBLE_AFTER_SECONDS: Final = 10.0
"""How long a BMC's problem lasts before `host status` and `--wait` say it: a flaky BMC's
1-second 503 blip, which the power cycle rides out, is no lasting problem (attack 41a MEDIUM-3)."""


def power_cycle_trouble(
    progress: PowerCycleProgress | None, attempt: int, maximum_attempts: int, last_failure: str, now: datetime
) -> str:
    """What a running power cycle's pending activity says that a person should know early, in
    words ("" nothing): its BMC does not answer, or answers only errors (the heartbeat details'
    `bmc_problem`, `bmc_answered_error`, since when, and until about when the attempt keeps
    trying, the driver's own deadline), once that has lasted `BMC_TROUBLE_AFTER_SECONDS`; and an
    attempt after a failed one (the last failure's words). Every word from the BMC or a failure
    passes `secret_free` again here. Pure: the caller read the pending activity (a describe it
    made anyway, `metalflow.operation_progress`)."""
    failed = secret_free(last_failure) if attempt > 1 and last_failure else ""
    last = maximum_attempts > 0 and attempt >= maximum_attempts
    of = f" of {maximum_attempts}" if maximum_attempts > 0 else ""
    since = None if progress is None or not progress.bmc_problem else progress.bmc_silent_since
    if progress is None or since is None or (now - since).total_seconds() < BMC_TROUBLE_AFTER_SECONDS:
        return f"the power cycle is on attempt {attempt}{of}; the last one failed: {failed}" if failed else ""
    problem = secret_free(progress.bmc_problem or "")
    bmc, _, said = problem.partition(": ") if problem.startswith("BMC ") else ("its BMC", "", problem)
    if progress.bmc_answered_error:  # it answered, with errors (a busy BMC): not silence
        words = f"{bmc} has answered errors since {iso_z(since)}, no success ({said or problem})"
    else:
        words = f"{bmc} has not answered since {iso_z(since)} ({said or problem})"
    until = progress.bmc_retry_until
    if until is None or until <= now:
        words += f"; the power cycle tries again (attempt {attempt}{of})"
    elif last:
        words += f"; the power cycle keeps trying until about {iso_z(until)}, then hands the run to a person"
    else:
        then = (
            f"; after attempt {maximum_attempts} the run is handed to a person" if maximum_attempts > 0
            else ", then tries again"
        )  # fmt: skip
        words += f"; the power cycle's attempt {attempt}{of} keeps trying until about {iso_z(until)}{then}"
    return words + (f" (attempt {attempt - 1} failed: {failed})" if failed else "")


def with_trouble(seen: Seen, words: str) -> Seen:
    """`seen` with `power_cycle_trouble`'s words after what it waits for ("" leaves it as it is);
    its beginning and its end are steps, so a `--wait` log says both (a detail it would not)."""
    if not words:
        return seen
    waiting = f"{seen.waiting_for}; {words}" if seen.waiting_for else words
    return replace(seen, waiting_for=waiting, trouble=words, milestone=f"{seen.milestone} {_TROUBLE}")
