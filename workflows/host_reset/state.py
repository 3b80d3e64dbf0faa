"""The reset sequences' pure decisions: which reset type each target sends to a DPU's BMC, the
order of the Arm-and-NIC sequence, and the refusal of a sequence a DPU's BMC cannot do.

The order follows the hardware as NVIDIA documents it (simulators/redfish/BEHAVIOUR.md B5, B10,
B12, B13; docs/DOMAIN.md section 4.5):

- A BlueField without separate power control is powered with its server: "Following a server
  power cycle, both the DPU and Host OSes begin boot at the same moment" (BlueField BSP,
  "Serialized DPU and Host Boot Sequence"), and DOCA's system-level reset is an Arm shutdown then
  a reboot of the server, with hosts that have separate power control as a special case (DOCA,
  "NVIDIA BlueField Reset and Reboot Procedures"). So the Arm does not boot while the host is
  off, and a wait for its OS with the host off waits for nothing: the DPU's OS is awaited after
  the host is powered on again.
- `PowerCycle` (Arm and NIC) takes effect only while the host asserts PERST (BF2) /
  All_STANDBY (BF3), i.e. with the host off (BF-BMC "Reset Control"): the host goes off first.

A BMC that does not take the reset type a sequence needs (its `ResetType@Redfish.AllowableValues`
or `ResetActionInfo`, as `drivers.redfish.system.find_system` reads them) is refused before
anything is sent: a sequence that would turn the host off and then find the DPU's BMC unable to
reset it is never started.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from contracts.errors import DPUsRemoved, InvalidInput
from contracts.models.host import HostResetInput, ResetTarget
from contracts.models.inventory import BMCAccess, HostInventory
from contracts.models.redfish import DPUResetType
from contracts.wording import left_out_words

# The Arm-and-NIC sequence (`--full`, `--both`), step by step, in the order the workflow runs it.
FULL_SEQUENCE: tuple[str, ...] = (
    "host ForceOff (PERST/All_STANDBY asserted: a PowerCycle takes effect now)",
    "DPU PowerCycle, each DPU",
    "host On (the DPU's Arm and the host boot together)",
    "wait for each DPU's OS (OsIsRunning) with the host on",
)

_WHY: Mapping[DPUResetType, str] = {
    "PowerCycle": "the Arm-and-NIC reset (--full, --both) is a PowerCycle of the DPU",
    "ForceRestart": "the Arm reset (--dpu, --all-dpus) is a ForceRestart of the DPU",
}


def full_reset(target: ResetTarget, full: bool) -> bool:
    """Whether the target resets the DPUs' Arm and NIC (host off and on around) rather than their
    Arm only; `--host` resets no DPU."""
    return target == ResetTarget.BOTH or (full and target != ResetTarget.HOST)


def dpu_reset_type(target: ResetTarget, full: bool) -> DPUResetType:
    """The reset each chosen DPU's BMC is sent."""
    return "PowerCycle" if full_reset(target, full) else "ForceRestart"


def refusal(
    host_id: str, reset_type: DPUResetType, takes: Mapping[str, tuple[str, ...] | None]
) -> str | None:
    """Why the sequence cannot run, or None: every DPU's BMC must take `reset_type` (`takes`: each
    DPU's reset types as its BMC lists them; None when they could not be read, which is no
    reason to refuse: the send then says what the BMC answers)."""
    missing = {dpu: types for dpu, types in takes.items() if types is not None and reset_type not in types}
    if not missing:
        return None
    named = "; ".join(
        f"{dpu}'s BMC takes {', '.join(types) or 'no reset type'}" for dpu, types in sorted(missing.items())
    )
    return (
        f"reset of {host_id} refused before anything was sent: {_WHY[reset_type]}, and {named} "
        f"(ResetType@Redfish.AllowableValues / ResetActionInfo of Systems/Bluefield); nothing was changed"
    )


def not_reset(
    chosen: Sequence[str], reset: Collection[str], failed: Mapping[str, str], *, host_cycled: bool = False
) -> str:
    """The chosen DPUs this run did not reset, each with why, in words ("" when every chosen DPU
    was reset, or when no reset was tried at all and the host was not power-cycled: the run's
    words say "nothing was reset").

    `reset`: the DPUs whose reset was sent (or found done); `failed`: the DPUs whose reset call
    ended without an answer, each with what happened (`reset_failed`). A DPU neither reset nor
    failed was not reached: the run ended before its turn. `host_cycled`: the run power-cycled
    the host (`done_words`), which rebooted each DPU's Arm but reset no NIC: every DPU it did not
    reset is named, whether a reset was tried or not."""
    if not reset and not failed and not host_cycled:
        return ""
    unreached = "not reached: the reset ended first"
    left = [f"{dpu} ({failed.get(dpu, unreached)})" for dpu in chosen if dpu not in reset]
    return f"not reset: {', '.join(left)}" if left else ""


def done_words(
    host_id: str,
    resets: Sequence[str],
    not_reset_words: str,
    cycled_to: int | None,
) -> str:
    """The body of an early end's `Done:` words: what the run reset (`resets`), the host's power
    cycle around the DPU resets when the run ended before it said so (`cycled_to`: the generation
    the BMC reached after this run's ForceOff, then On; None: no such cycle, or `resets` says it),
    and each chosen DPU not reset (`not_reset_words`, from `not_reset`). "nothing was reset" only
    when the run did none of it.

    A host power cycle is no DPU reset, but it is not nothing either: a BlueField's Arm has power
    only while its host is on (simulators/redfish/BEHAVIOUR.md B10, B12), so each DPU's Arm
    rebooted with it; its NIC is reset only by the PowerCycle sent to its own BMC."""
    words = list(resets)
    if cycled_to is not None:
        words.append(
            f"host {host_id} power-cycled (this run's ForceOff, then On): generation {cycled_to} "
            "reached, which rebooted each DPU's Arm with it (a BlueField's Arm has power only while its "
            "host is on; its NIC is reset only by its own PowerCycle)"
        )
    if not_reset_words:
        words.append(not_reset_words)
    return "; ".join(words) or "nothing was reset"


def reset_failed(reset_type: DPUResetType, error_type: str | None) -> str:
    """Why a DPU's reset call gave no answer: its BMC's error (`error_type`, e.g.
    BMCAuthenticationFailed: the run's cause says its message), or None: the call was stopped
    (an abort, a cancel) while in flight, so the reset may have been sent."""
    if error_type is None:
        return f"its {reset_type} was stopped in flight: it may have been sent"
    return f"its {reset_type} failed: {error_type}"


def chosen_dpus(request: HostResetInput, inventory: HostInventory) -> list[tuple[str, BMCAccess]]:
    """The DPUs the reset acts on, each with its BMC; or the refusal, before anything is sent.
    `--dpu` names them; every DPU (`--all-dpus`, `--both`) means the DPUs DPF still has: the
    inventory's, less those the entity's removals took out (`request.left_out`, issue 40: they
    were reset as well), and refused (`DPUsRemoved`) when none is left."""
    if request.target == ResetTarget.HOST:
        return []
    host, known = inventory.host_id, {d.id: d for d in inventory.dpus}
    if request.target == ResetTarget.DPU:
        wanted = request.dpu_ids
    else:
        wanted = tuple(d for d in known if d not in request.left_out)
        gone = {d: by for d, by in request.left_out.items() if d in known}
        if known and not wanted:
            dpus, by = ",".join(gone), ", ".join(sorted(set(gone.values())))
            raise DPUsRemoved(
                f"reset of {host} refused: DPF no longer has {', '.join(gone)} (removed by {by}) and "
                f"{host} has no other DPU; nothing was changed (bring them back with: metalflow host "
                f"provision {host} --dpus {dpus})",
                {"dpu_ids": list(gone)},
            )
    if not wanted:
        raise InvalidInput(f"reset of host {host}: name the DPUs (it has {', '.join(known) or 'none'})")
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        raise InvalidInput(f"host {host} has no DPU {', '.join(unknown)} (it has {', '.join(known)})")
    without = [d for d in wanted if known[d].bmc is None]
    if without:
        raise InvalidInput(f"DPU {', '.join(without)} of host {host} has no BMC to reset it through")
    return [(d, bmc) for d in wanted if (bmc := known[d].bmc) is not None]


def left_out_said(request: HostResetInput, inventory: HostInventory | None) -> str:
    """The DPUs every-DPU reset left out, in words for its details and end ("" none): those the
    inventory lists (all of them before it was read)."""
    known = {d.id for d in inventory.dpus} if inventory is not None else set(request.left_out)
    return left_out_words({d: by for d, by in request.left_out.items() if d in known})
