"""One vocabulary for everything metalflow prints: timestamps, counts, durations.

Timestamps are ISO 8601 in UTC with `Z` (`2026-11-22T21:45:02Z`), whatever the local zone or
the offset a datetime carries; counts take the right plural ("1 DPU", "2 DPUs"); durations are
`m:ss` or `h:mm:ss`. Pure functions, no I/O: the CLI, the demo and workflows' details share them.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

_IRREGULAR = {"is": "are", "was": "were", "has": "have"}


def iso_z(when: datetime | None, *, none: str = "-") -> str:
    """`when` as ISO 8601 UTC to the second with `Z`; a naive datetime is taken as UTC."""
    if when is None:
        return none
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LogFormatterZ(logging.Formatter):
    """A log line's time in ISO 8601 UTC with milliseconds and `Z` (`2026-11-29T09:21:05.123Z`),
    as every time metalflow prints (the logging default is local time with a comma and no zone)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        when = datetime.fromtimestamp(record.created, UTC)
        return f"{when.strftime('%Y-%m-%dT%H:%M:%S')}.{int(record.msecs):03d}Z"


def plural(count: int, word: str, words: str | None = None) -> str:
    """`1 DPU`, `2 DPUs`, `0 hosts`; `words` for an irregular plural (`plural(n, "entry", "entries")`)."""
    if count == 1:
        return f"{count} {word}"
    return f"{count} {words or _IRREGULAR.get(word) or word + 's'}"


def duration(span: timedelta | float) -> str:
    """`0:07`, `12:03`, `1:02:03`: a span a person reads at a glance (never negative)."""
    seconds = max(0, int(span.total_seconds() if isinstance(span, timedelta) else span))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


CANCELLED_OUTCOME = (
    "cancelled (the workflow was cancelled: `temporal workflow cancel` or its parent's close; "
    "no operator's abort)"
)
"""A host's record of an operation cancelled in Temporal (no result, no words: a cancel carries none),
never `aborted`, which reads as an operator's `host abort` naming the requester. The words of
what it did and left are its final Phase details (`--wait` reads them)."""

CANCELLED_PHASE = "**cancelled**: "  # how a cancelled run's final details begin (`kernel.end_early`)


def cancel_left(details: str) -> str:
    """What a cancelled run's final details (`**cancelled**: cancelled (the workflow was
    cancelled). Done: ...`) say it did and left (`Done: ...`); details of another form whole
    (after their phase); "" none. The details are read with `contracts.run_words.final_details`."""
    said = details.split("**: ", 1)[-1]
    return said.split(". ", 1)[1] if said.startswith("cancelled (") and ". " in said else said


COMPLETED_OUTCOME = "completed"  # a host's record of an operation that ended as planned
BY_ITS_CANCEL = "(On sent by its cancel)"  # a reboot's method: its cancel sent the On after its ForceOff


def completed_outcome(cancelled: str, generation: int | None) -> str:
    """A host's record of an operation that completed (`OperationEnd.cancelled`: a cancel in
    Temporal it completed anyway, in words; e.g. a reboot whose cancel sent On after its ForceOff:
    `completed (cancelled in Temporal after its ForceOff; its cancel sent On: power-cycled to
    generation N)`). Before, such a reboot read `completed`, the cancel unsaid (attack L6)."""
    if not cancelled:
        return COMPLETED_OUTCOME
    reached = f": power-cycled to generation {generation}" if generation is not None else ""
    return f"{COMPLETED_OUTCOME} ({cancelled}{reached})"


def cut_short_words(cancelled: bool) -> str:
    """What a reboot's method says of a power-down wait a stop cut short (On sent at once): its
    cancel's (`cancelled`, README's `bmc:ForceOff+On (On sent by its cancel)`) or an abort's."""
    return f" {BY_ITS_CANCEL}" if cancelled else ", cut short: On sent at once"


def reboot_cancel_words(method: str, cancelled: bool) -> str:
    """A reboot's `OperationEnd.cancelled`: cancelled in Temporal (`cancelled`) and completed all
    the same, its cancel having sent the On after its ForceOff (`method` says so), or its power
    cycle having ended first; "" when no cancel came."""
    if BY_ITS_CANCEL in method:
        return "cancelled in Temporal after its ForceOff; its cancel sent On"
    return "cancelled in Temporal during its power cycle, which ended first" if cancelled else ""


def is_completed(outcome: str) -> bool:
    """A host's record says the operation completed (`completed_outcome`'s words, either form)."""
    return outcome == COMPLETED_OUTCOME or outcome.startswith(f"{COMPLETED_OUTCOME} (")


def aborted_outcome(message: str) -> str:
    """An operation an operator aborted, in the entity's record (`host status`, campaigns): it
    reads `aborted ...`, never `failed: ...`. `message` is the operation's abort error."""
    return message if message.startswith("aborted") else f"aborted: {message}"


def with_its_reboot(own: str, reboot_id: str, phase: str, words: str) -> str:
    """An operation's words with what its reboot child waits for now: one wording for `host
    status`, `--wait` (`metalflow.operation_progress.with_its_reboot`) and the operation's own current details
    in the Temporal UI (`workflows/parts/reboot_rounds.py`)."""
    return f"{own}; its reboot {reboot_id}: {phase}: {words}".lstrip("; ")


HOST_ANSWER_COMMANDS = {
    "retry": "metalflow host retry {host}",
    "mark_rebooted": "metalflow host mark-rebooted {host}",
    "abort": "metalflow host abort {host}",
}
"""The CLI's command for each answer to a host operation's manual intervention (its update name:
`retry`, `mark_rebooted`, `abort`); scripts and the Temporal CLI send the updates (README)."""


def answers_in_words(kinds: tuple[str, ...], when: dict[str, str], host_id: str | None = None) -> str:
    """The one sentence that says how to answer an operator's question: each answer (`abort`
    last) with when to give it (`when`, e.g. "once the BMC is fixed"). For a host (`host_id`): the
    CLI's commands (`metalflow host mark-rebooted HOST`); else the updates by name."""

    def one(kind: str) -> str:
        command = HOST_ANSWER_COMMANDS.get(kind) if host_id else None
        named = f"`{command.format(host=host_id)}`" if command else f"`{kind}`"
        return named + (f" {when[kind]}" if when.get(kind) else "")

    named = [one(kind) for kind in (*kinds, "abort")]
    listed = f"{', '.join(named[:-1])} or {named[-1]}" if len(named) > 1 else named[0]
    if host_id:
        return f"Answer with {listed}"
    return f"Answer with the update {listed} (`metalflow` CLI, Temporal CLI or UI)"


def method_words(method: str) -> str:
    """How a host was rebooted, one spelling everywhere: a reboot's result says `bmc:ForceOff+On`
    (the BMC's, apart from `manual`); its own final details and a reset's line say `ForceOff+On`."""
    return method.removeprefix("bmc:")


def left_out_words(left: dict[str, str]) -> str:
    """DPUs a reset of every DPU left out because DPF no longer has them (DPU id to the removal
    that took it out), in words ("" none), as the host's entity answers and the reset run says."""
    if not left:
        return ""
    by = ", ".join(sorted(set(left.values())))
    them = "them" if len(left) > 1 else "it"
    return f"left out {', '.join(left)}: DPF no longer has {them} (removed by {by})"
