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
read showed On, `PowerCustody.seen_on`) leaves it On; one that completed without powering the
host keeps the baseline before it (None stays None); any other end (failed, aborted, terminated
without saying OFF) is unknown: the baseline is forgotten (`forget_baseline`) and the next reading
is one. The start of a maintenance forgets it too (a person's power actions there are expected,
and not read). No BMC request: the operation's own end says it.

A reboot the entity starts is handed the baseline (`baseline`): its first BMC read that differs
is someone else's power action just before it began (`workflows/host_reboot/failure.py`); what an
operation's reads found is shown as the last unplanned change (`found_by_operation`).
"""

from __future__ import annotations

from datetime import datetime

from contracts.models.power_watch import PowerAtRest
from contracts.wording import iso_z
from workflows.parts.host_power import HOST_IS_OFF

COMPLETED = "completed"  # the entity's outcome of an operation that ended as planned


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


def after_reading(
    host_id: str, before: PowerAtRest | None, power_state: str, last_reset: datetime | None, now: datetime
) -> tuple[PowerAtRest, str | None]:
    """The new memory of the host's power after a reading at rest, and the change to tell (if any)."""
    words = unplanned_at_rest(host_id, before, power_state, last_reset, now)
    kept = before.unplanned if before is not None else ""
    now_known = PowerAtRest(power_state=power_state, last_reset_time=last_reset, read_at=now)
    return now_known.model_copy(update={"unplanned": words or kept}), words


def baseline(power: PowerAtRest | None) -> PowerAtRest | None:
    """The last reading at rest a reboot compares its first read with (`HostRebootInput.power_before`):
    None when there is none since our last operation (or since maintenance began)."""
    if power is None or not power.power_state or power.read_at is None:
        return None
    return power.model_copy(update={"unplanned": ""})


def found_by_operation(power: PowerAtRest | None, words: str) -> PowerAtRest:
    """An operation's own reads found a power change nobody here made (its result's
    `unplanned_power`): it is the last one told, as the power watch's are (no new baseline)."""
    return (power or PowerAtRest()).model_copy(update={"unplanned": words})


def forget_baseline(power: PowerAtRest | None) -> PowerAtRest | None:
    """After an operation of ours: the next reading is a new baseline (the last unplanned change
    is still shown)."""
    return None if power is None else power.model_copy(update={"power_state": "", "read_at": None})


def left_by_operation(outcome: str, cycled: bool) -> str | None:
    """The host's power an ended operation left, from its end alone: "Off" (its outcome says the
    host is OFF), "On" (it completed having reached a new boot generation: its cycle ended On), ""
    (it completed without powering the host: the power is as before it), None (unknown)."""
    if HOST_IS_OFF in outcome:
        return "Off"
    if outcome != COMPLETED:
        return None
    return "On" if cycled else ""


def after_operation(
    power: PowerAtRest | None, outcome: str, ran: bool, cycled: bool, now: datetime
) -> PowerAtRest | None:
    """The baseline after an operation of ours ended at `now` with `outcome` (`ran`: it started;
    `cycled`: it reached a new boot generation): the power it left the host in as of its end
    (`left_by_operation`), the baseline before it (it never started, or never powered the host),
    or none (unknown: the next reading is one). The last unplanned change told is kept always."""
    left = left_by_operation(outcome, cycled) if ran else ""
    if left == "":
        return power
    if left is None:
        return forget_baseline(power)
    told = power.unplanned if power is not None else ""
    return PowerAtRest(power_state=left, read_at=now, unplanned=told)
