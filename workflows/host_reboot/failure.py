"""What a BMC's failure to reboot a host is called, in words an operator can act on.

`HostRebootWorkflow` puts the reason in its Phase details (manual reboot wait) or, for a caller
that escalates on its own, in the failure `BMCRebootFailed`; a host operation quotes it in the
manual-intervention reason. The activity's error type decides the words: a BMC that rejects the
credentials is named as such (it will not pass by waiting), an unreachable one as unreachable
(the network or the BMC is down), and only a BMC that answered "busy" (409, 429, 5xx) as busy.

It also holds the one decision a reboot takes when another actor has the host's power
(`decide_on_power_taken_over`), the bare-metal manager's loop (dsx-ai-factory/infra-controller#1958:
its power manager turned the host back On during a DPU reprovision's power-down, the reprovision
turned it Off again, for 14 hours) never repeated:

- Off was read from the BMC after our ForceOff, then the host was found On before our On: the
  host was power-cycled, by our Off and their On. That is the reboot DPF asks for: its
  `PowerCycle` reboot method needs the host Off once, so the BlueField's PERST / All_STANDBY is
  asserted and its own PowerCycle takes effect (NVIDIA BlueField BMC docs v24.04-v25.10, "allowed
  only when the host asserts", /work/shared/design/UPSTREAM.md section 3 and simulators/redfish/
  BEHAVIOUR.md B5), and DPF's `processExternalReboot` only waits for the external actor to remove
  `dpunode-external-reboot-required` (UPSTREAM.md section 2.3), trusting that it cycled the host.
  The power-down wait cut short by them is a BMC courtesy (bare-metal manager PR #708: BMCs
  that get ForceOff and On 2 s apart fail to power on), not part of the reboot: theirs
  succeeded, the host is On. So the reboot goes on as done: no On sent, no ForceOff again,
  said in the details, the result (`unplanned_power`) and an `UnplannedPower` Warning Event.
- Off never seen (the host found On again after two ForceOffs the BMC accepted): no proof the
  host was ever off, so a person decides (`PowerContested`, the manual reboot wait or the
  operation's escalation): never a third ForceOff.
- Found changed before it began (`decide_on_power_found`): the cycle's first read differs from
  the entity's last reading at rest (no operation of ours since, `HostRebootInput.power_before`):
  someone else powered the host Off (or On) just before. Said once; the reboot goes on as it
  would (a host found Off gets On only: that Off and our On are the cycle). No request added.
- The power-down wait the reboot spends on its own timer reads the host's power every
  `OperationPolicy.power_down_read_seconds` (`power_down_reads`), so an On by another actor is
  seen then, not when the timer ends; the decision is the first one above, once.

Cost: none beyond the strings (pure functions, no I/O).
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.exceptions import ActivityError, ApplicationError, FailureError, TimeoutError

from contracts.errors import first_application_error
from contracts.models.host import HostRebootInput
from contracts.models.power_watch import PowerAtRest
from contracts.models.redfish import POWER_CYCLE_STEP, STEPS_HOST_MAY_BE_OFF
from contracts.wording import iso_z

_UNREACHABLE_MARKS = ("cannot reach", "timed out")
_EITHER = ("On", "Off")  # PowerStates that are no transition
UNPLANNED_POWER = "unplanned-power"  # the occurrence `kernel.report` hands to Events: UnplannedPower


def decide_on_power_taken_over(host_id: str, generation: int, seen: str) -> str:
    """The decision when the host, read Off after our ForceOff, was found On before our On
    (`seen`: when and how): the Off-On is this reboot; nothing more is sent. In words."""
    return (
        f"unplanned power: {host_id} was turned On by someone else ({seen}); metalflow did not send "
        f"that On. The host was Off, then On: counted as the power cycle of generation {generation}, "
        "no ForceOff sent again (find who powers this host: a power manager, a person at its BMC)"
    )


def decide_on_power_found(
    host_id: str, generation: int, before: PowerAtRest | None, found: str
) -> str | None:
    """The reboot's first read (`found`: PowerState) against the entity's last reading at rest
    (`before`; no operation of ours ran since, the entity forgets it at each end): a different
    On/Off is someone else's doing, just before this reboot began. In words; None: nothing to tell
    (no reading to compare, nothing read, a transition, or the same)."""
    if before is None or before.read_at is None or before.power_state not in _EITHER or found not in _EITHER:
        return None
    if found == before.power_state:
        return None
    at = iso_z(before.read_at)
    read = f"its entity read it {before.power_state} at {at}, no power action of metalflow since"
    if found == "Off":
        then = (
            "metalflow did not send that Off. Only On was sent: that Off and our On counted as the "
            f"power cycle of generation {generation}"
        )
    else:
        then = f"metalflow did not send that On. The reboot cycles it as asked (generation {generation})"
    return (
        f"unplanned power: {host_id} was found {found} by someone else before reboot generation "
        f"{generation} began ({read}; this reboot's first read: {found}); {then} "
        "(find who powers this host: a power manager, a person at its BMC)"
    )


def power_down_reads(wait_seconds: float, every_seconds: float) -> list[float]:
    """When (seconds into a power-down wait the reboot spends on its own timer) it reads the
    host's power: every `every_seconds`, never at or after the wait's end (the On step reads the
    host then anyway). `ceil(wait / every) - 1` reads: 9 for 300 s at 30 s, 3 for the 120 s default."""
    if every_seconds <= 0:
        return []
    reads: list[float] = []
    at = every_seconds
    while at < wait_seconds:
        reads.append(at)
        at += every_seconds
    return reads


def seen_on_words(seen_at: datetime, off_read_at: datetime, into: float, wait_seconds: float) -> str:
    """Another actor's On found by a read during our power-down wait, in honest words: when our
    read saw it (`seen_at`: the On itself was earlier, after our read that still saw Off at
    `off_read_at`; a read every `power_down_read_seconds`), never "On at" that read's time."""
    return (
        f"On (seen by our read at {iso_z(seen_at)}; Off at our read at {iso_z(off_read_at)}), "
        f"{into:.0f} s into our power-down wait of {wait_seconds:.0f} s, before our On"
    )


def power_down_words(host_id: str, off_since: datetime, on_at: datetime, read: str, watched: str) -> str:
    """The reboot's details during its power-down wait (what `host status`, `--wait` and the UI
    show): since when the host is Off and when it is turned On, in ISO 8601 Z, so the line stays
    true however late it is read (a relative "On in N s" replayed after a worker restart read as
    a wait begun anew); `read`: the last read's words ("" before the first)."""
    off = f"Off since {iso_z(off_since)}" + (f" ({read})" if read else "")
    return f"power-down wait: {host_id} is {off}, On at {iso_z(on_at)} (a durable timer{watched})"


def bmc_failure_reason(host_id: str, err: FailureError) -> str:
    """One line: what the BMC of `host_id` did, then the activity's own message."""
    cause = err.cause if isinstance(err, ActivityError) else err
    while isinstance(cause, TimeoutError) and cause.cause is not None:
        cause = cause.cause  # a start-to-close timeout: the last attempt's error says more
    if not isinstance(cause, ApplicationError):
        return f"the BMC of {host_id} could not reboot it ({cause or err})"
    kind, message = cause.type, cause.message
    if kind == "BMCAuthenticationFailed":
        what = "rejected the credentials"
    elif kind == "CredentialsUnavailable":
        what = "cannot be logged in to: its credentials cannot be read"
    elif kind == "BMCUnavailable" and any(mark in message for mark in _UNREACHABLE_MARKS):
        what = "is unreachable"
    elif kind == "BMCUnavailable":
        what = "stayed busy"
    elif kind == "ResetTypeNotSupported":
        what = "does not offer the reset needed"
    elif kind == "BMCRequestRejected":
        what = "rejected the request"
    elif kind == "PowerContested":
        what = "keeps being turned back On by another actor"
    elif kind == "PowerStateTimeout":
        what = "did not reach the power state in time"
    else:
        what = "could not reboot it"
    return f"the BMC of {host_id} {what} ({kind}: {message})"


def off_step(err: FailureError) -> str | None:
    """The step a failed power cycle had reached when it may have left the host off
    (`off_requested`, `off_reached`, `on_requested`: the activity's detail `POWER_CYCLE_STEP`),
    else None (it failed before any ForceOff, or it was a PowerCycle the BMC completes itself)."""
    found = first_application_error(err)
    for detail in found.details if found is not None else ():
        if isinstance(detail, dict) and detail.get(POWER_CYCLE_STEP) in STEPS_HOST_MAY_BE_OFF:
            return str(detail[POWER_CYCLE_STEP])
    return None


def owed_since(request: HostRebootInput, started: datetime) -> datetime:
    """Since when the reboot is owed: the caller's `owed_since` (when DPF asked) if earlier than
    this run's start. A first attempt that finds the host reset after it takes that reset as
    this reboot (`powercycle`, `already_done`): an unplanned reset is never followed by a second."""
    owed = request.owed_since
    return owed if owed is not None and owed < started else started


_OFF_SINCE = "is Off since "


def power_down_off_since(words: str) -> datetime | None:
    """When the host went Off, read back from `power_down_words` (the CLI's `--wait` dates the
    wait from it, not from when it first saw the words); None for other words."""
    stamp = words.partition(_OFF_SINCE)[2][:20]  # `iso_z`: 2026-11-29T10:12:33Z
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
