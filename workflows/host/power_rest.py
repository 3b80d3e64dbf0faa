"""The host's power at rest: is a change metalflow did not cause? Pure decisions for the entity's
power watch (`power_watch.py`).

The entity reads the host's power every `HostWorkflowInput.power_watch_seconds` while no
operation runs and the host is not in maintenance (a person's work there is expected to power it).
Each reading is compared with the one before (`unplanned_at_rest`): `PowerState` changed (On to
Off, Off to On), or `LastResetTime` moved while it stayed On (a reset), is a power change nobody
here made, since no operation of ours ran in between. At an operation's end the baseline is the
power the operation left the host in, as of its end (`after_operation`), never the next reading
(an Off by someone else just after our cycle would become the baseline, unseen): a run whose
outcome says the host is OFF (`HOST_IS_OFF`, workflows/parts/host_power.py) leaves it Off; one
that completed having cycled the host (a boot generation reached: its power-on succeeded or its
read showed On, `PowerCustody.seen_on`) leaves it On, with the LastResetTime its last reboot's
final read showed when that reboot moved it (the result's `last_reset_time`: a reset by hand
right after our run is then told too; None when not known, and then only PowerState is
compared); one that completed without powering the
host keeps the baseline before it (None stays None); any other end (failed, aborted, terminated
without saying OFF) is unknown: the baseline is forgotten (`forget_baseline`) and the next reading
is one. The start of a maintenance forgets it too (a person's power actions there are expected,
and not read), and an operation that ends inside a maintenance sets none (the first reading after
maintenance off is the baseline). No BMC request: the operation's own end says it.

Each DPU's reset at rest (issue 39): the same watch reads each DPU BMC's reset mark (`LastResetTime`,
else `BootProgress.LastStateTime`: `DPUSystemState.reset_mark`) and compares it with the mark of the
reading before (`dpu_resets_at_rest`): a mark that moved while no operation of ours ran is a reset
nobody here made (a person's `ForceRestart` at the DPU's BMC, a crash of its Arm). metalflow's own
DPU resets all happen inside an operation (a reset, a (re)provision, a firmware run), so an
operation that ran forgets every DPU mark (`after_operation`, `forget_baseline`) and the next
reading is the new one (a blind window of one watch period after each operation, as for a failed
run's host power). A reading whose host power itself changed tells that change only: a host's
power cycle moves its DPUs' boot stage times too (simulators/redfish/BEHAVIOUR.md B12).

A power action through metalflow's own CLI (`metalflow bmc power HOST on|off|cycle`, e.g. the OFF
WARNING's own advice) is planned: the command tells the entity (signal `power_set`) and, while no
operation runs and the host is not in maintenance, what it did is the new baseline
(`after_power_set`: the power it left, as of when it saw it; no LastResetTime, so only PowerState
is compared next; the DPUs' marks forgotten, a host's power change boots its DPUs again).

A reboot the entity starts is handed the baseline (`baseline`): its first BMC read that differs
is someone else's power action just before it began (`workflows/host_reboot/failure.py`); what an
operation's reads found is shown as the last unplanned change (`found_by_operation`).
"""

from __future__ import annotations

from datetime import datetime

from contracts.models.power_watch import PowerAtRest
from contracts.wording import is_completed, iso_z
from workflows.parts.host_power import HOST_IS_OFF

COMPLETED = "completed"  # the entity's outcome of an operation that ended as planned


def next_reading(every: float, first: float, doubt: str, unanswered: int) -> tuple[float, bool]:
    """When the watch reads next, in seconds, and whether that reading is the host's power only (a
    re-read of a doubt). No doubt (`doubt` "": no run's end left the host's power unread): the
    watch's period `every`, a full reading (the host and each DPU). While a run's end left it unread
    ("may be OFF", `doubt` names the run) and `unanswered` re-reads since were not answered either:
    `first` seconds, doubled after each (60 s, 120 s, 240 s, ...), the host's power only, until the
    delay reaches `every`; from then on the watch's own full reading at `every` (which decides the
    doubt too). So a doubt costs `log2(every / first)` host reads more at most (4 at 900 s and
    60 s), and a host in no doubt nothing."""
    if not doubt:
        return every, False
    delay = first * 2 ** min(unanswered, 30)  # bounded: a dead BMC for weeks never overflows
    return (every, False) if delay >= every else (delay, True)


def unplanned_at_rest(
    host_id: str, before: PowerAtRest | None, power_state: str, last_reset: datetime | None, now: datetime
) -> str | None:
    """The change since the last reading at rest, in words; None when there is none to tell (no
    baseline yet, or nothing changed)."""
    if before is None or not before.power_state or before.read_at is None:
        return None
    since = f"between {iso_z(before.read_at)} and {iso_z(now)}, no metalflow operation running"
    if power_state != before.power_state:
        return (
            f"unplanned power: {host_id} went {before.power_state} -> {power_state} {since}; "
            "metalflow did not cause it (find who powers this host: a power manager, a person at its BMC)"
        )
    if power_state == "On" and last_reset is not None and before.last_reset_time not in (None, last_reset):
        return (
            f"unplanned power: {host_id} was reset (LastResetTime {iso_z(last_reset)}) {since}; "
            "metalflow did not cause it"
        )
    return None


def dpu_resets_at_rest(
    host_id: str, before: PowerAtRest | None, marks: dict[str, str], now: datetime
) -> str | None:
    """The DPUs whose reset mark moved since the last reading at rest (`marks`: this reading's, by
    DPU id, "" for a BMC that shows none; a DPU not read now, or not read before, is not compared;
    a mark that appears counts, one that vanishes does not), in words; None: none."""
    if before is None or before.read_at is None or not before.dpu_marks:
        return None
    moved = [
        f"DPU {dpu_id} of {host_id} was reset "
        f"(its BMC's reset mark {before.dpu_marks[dpu_id] or 'none'} -> {mark})"
        for dpu_id, mark in sorted(marks.items())
        if mark and before.dpu_marks.get(dpu_id) not in (None, mark)
    ]
    if not moved:
        return None
    return (
        f"unplanned power: {', '.join(moved)} between {iso_z(before.read_at)} and {iso_z(now)}, "
        "no metalflow operation running; metalflow did not cause it (find who resets it: a person at "
        "its BMC, a crash of its Arm)"
    )


def after_reading(
    host_id: str,
    before: PowerAtRest | None,
    power_state: str,
    last_reset: datetime | None,
    now: datetime,
    dpu_marks: dict[str, str] | None = None,
) -> tuple[PowerAtRest, str | None]:
    """The new memory of the host's power (and its DPUs' reset marks, `dpu_marks`: by DPU id, those
    read now) after a reading at rest, and the change to tell (if any): the host's own change, else
    its DPUs' resets. A DPU not read now keeps the mark read before."""
    read = dpu_marks or {}
    words = unplanned_at_rest(host_id, before, power_state, last_reset, now) or dpu_resets_at_rest(
        host_id, before, read, now
    )
    kept = before.unplanned if before is not None else ""
    marks = {**(before.dpu_marks if before is not None and before.read_at is not None else {}), **read}
    now_known = PowerAtRest(power_state=power_state, last_reset_time=last_reset, read_at=now, dpu_marks=marks)
    return now_known.model_copy(update={"unplanned": words or kept}), words


def after_power_set(power: PowerAtRest | None, power_state: str, at: datetime) -> PowerAtRest:
    """The baseline after `metalflow bmc power` left the host `power_state` at `at` (module
    docstring): that power, the last unplanned change told kept."""
    told = power.unplanned if power is not None else ""
    return PowerAtRest(power_state=power_state, read_at=at, unplanned=told)


def baseline(power: PowerAtRest | None) -> PowerAtRest | None:
    """The last reading at rest a reboot compares its first read with (`HostRebootInput.power_before`):
    None when there is none since our last operation (or since maintenance began)."""
    if power is None or not power.power_state or power.read_at is None:
        return None
    return power.model_copy(update={"unplanned": "", "dpu_marks": {}})


def found_by_operation(power: PowerAtRest | None, words: str) -> PowerAtRest:
    """An operation's own reads found a power change nobody here made (its result's
    `unplanned_power`): it is the last one told, as the power watch's are (no new baseline)."""
    return (power or PowerAtRest()).model_copy(update={"unplanned": words})


def forget_baseline(power: PowerAtRest | None) -> PowerAtRest | None:
    """After an operation of ours: the next reading is a new baseline, of the host and its DPUs
    (the last unplanned change is still shown)."""
    if power is None:
        return None
    return power.model_copy(update={"power_state": "", "read_at": None, "dpu_marks": {}})


def left_by_operation(outcome: str, cycled: bool) -> str | None:
    """The host's power an ended operation left, from its end alone: "Off" (its outcome says the
    host is OFF), "On" (it completed having reached a new boot generation: its cycle ended On), ""
    (it completed without powering the host: the power is as before it), None (unknown)."""
    if HOST_IS_OFF in outcome:
        return "Off"
    if not is_completed(outcome):
        return None
    return "On" if cycled else ""


def after_operation(
    power: PowerAtRest | None,
    outcome: str,
    ran: bool,
    cycled: bool,
    now: datetime,
    *,
    in_maintenance: bool = False,
    last_reset: datetime | None = None,
) -> PowerAtRest | None:
    """The baseline after an operation of ours ended at `now` with `outcome` (`ran`: it started;
    `cycled`: it reached a new boot generation): the power it left the host in as of its end
    (`left_by_operation`), the baseline before it (it never started, or never powered the host),
    or none (unknown: the next reading is one). The DPUs' marks are forgotten whenever it ran (it
    may have reset them). The last unplanned change told is kept always. A run that left the host
    On keeps `last_reset`, the host's LastResetTime as its last reboot read it at its end (its
    result's; None: not known), so a reset by hand right after it is told at the next reading
    (`unplanned_at_rest` compares it). One that ends while the
    host is in maintenance (`in_maintenance`) sets none: a person's power actions there are
    expected and not read, so the first reading after maintenance off is the baseline."""
    if in_maintenance:
        return forget_baseline(power)
    left = left_by_operation(outcome, cycled) if ran else ""
    if left == "":
        return power if power is None or not ran else power.model_copy(update={"dpu_marks": {}})
    if left is None:
        return forget_baseline(power)
    told = power.unplanned if power is not None else ""
    mark = last_reset if left == "On" else None
    return PowerAtRest(power_state=left, last_reset_time=mark, read_at=now, unplanned=told)
