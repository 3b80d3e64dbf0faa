"""What a firmware run decides from what it knows, as pure functions (no temporalio, no I/O).

- **A wait that cannot progress is refused before the power cycle** (`not_in_dpf`,
  `not_in_dpf_words`): a DPU DPF has no object of (never provisioned, or removed) never reaches
  `Ready` after the power cycle, so the run would wait in `waiting-for-dpus` until its phase
  timeout (an hour by default) and say nothing. The run fails before it reboots anything,
  naming the DPUs and what DPF has; the CLI refuses the same request before sending it
  (metalflow/cli/inventory_check.py).
- **Abort in every phase where the run waits** (`PHASES`, `abort_refusal`): the run takes an
  abort in each of its phases but one: while its power cycle runs (`power-cycling`) the abort
  belongs to that reboot (`reboot/<host>/generation-<n>`), which stops it safely (a host it
  turned off is powered back on, never left off, never cycled twice); `metalflow host abort`
  passes it there, and this run then ends `aborted` too. Before the power cycle nothing is
  rebooted; after it, the run stops waiting for the host and its DPUs (the staged images are
  activated by that cycle, unverified).

tests/fast/test_firmware_state.py asks these questions of hand-written states.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

from contracts.models.dpf import HostDPFState

PHASES: Final[dict[str, Literal["the run", "its reboot"]]] = {
    # Every phase the runbook enters (`self.enter`) before it ends, and who takes an abort there.
    "resolving-inventory": "the run",
    "reading-versions": "the run",
    "staging": "the run",
    "waiting-for-dpf-idle": "the run",
    "power-cycling": "its reboot",
    "waiting-for-host": "the run",
    "waiting-for-dpus": "the run",
    "verifying": "the run",
}


def abort_refusal(host_id: str, phase: str, reboot_in_flight: str | None) -> str | None:
    """Why the run refuses an abort in `phase` (None: it takes it): only while its power cycle
    runs, whose reboot takes the abort instead (`metalflow host abort` passes it on)."""
    if PHASES.get(phase) != "its reboot" or reboot_in_flight is None:
        return None
    return (
        f"its power cycle {reboot_in_flight} runs: that reboot takes the abort (`metalflow host "
        f"abort {host_id}` passes it on; the host is powered back on, never left off), and this run "
        "then ends aborted"
    )


def abort_outcome(cycled_to: int | None) -> str:
    """What an abort accepted now leaves, in words (before or after the power cycle)."""
    if cycled_to is None:
        return "no reboot was done"
    return (
        f"the host was power-cycled to generation {cycled_to}, which activated the staged images; "
        "their versions were not verified"
    )


def cycled_words(staged: list[str], version: str, cycled_to: int, *, reboot_aborted: bool) -> str:
    """What an early end after the run's power cycle reached `cycled_to` leaves, in words: that
    cycle activated the images staged (B-firmware: a staged image runs after the host's next
    power cycle), unverified; `reboot_aborted`: the abort stopped that reboot once it had cycled
    the host (its power-down wait cut short, On sent at once). Before, such an end said `staged
    on ...` of images already running, and the abort after the cycle `which activates` (attack
    L1): both now say the same, in the past tense."""
    cycled = f"the host was power-cycled to generation {cycled_to}"
    if reboot_aborted:
        cycled += " before its reboot was aborted"
    if not staged:
        return f"nothing staged; {cycled}"
    on = ", ".join(staged)
    return f"{cycled}, which activated {version} staged on {on}; their versions were not verified"


def not_in_dpf(state: HostDPFState, dpu_ids: Iterable[str]) -> list[str]:
    """The DPUs under the operation DPF has no object of (or only one being deleted)."""
    return [d for d in dpu_ids if (s := state.dpu(d)) is None or s.deleting]


def not_in_dpf_words(host_id: str, missing: list[str], state: HostDPFState) -> str:
    """The failure's words: which DPUs, what DPF has instead, why the run stops, what to do."""
    present = [d for d in state.dpus if not d.deleting]
    has = ", ".join(f"{d.dpu_id or d.name} ({d.phase or 'no phase yet'})" for d in present)
    node = "no DPUNode" if state.node is None else "its DPUNode"
    return (
        f"DPF has no DPU object of {', '.join(missing)} of host {host_id} ({node}; DPUs: {has or 'none'}): "
        "never provisioned, or removed, they would never reach Ready after the power cycle, so the "
        f"host was not rebooted (provision it first: metalflow host provision {host_id})"
    )


def staged_words(staged: list[str], version: str, *, cycled: bool) -> str:
    """What an early end leaves staged, per DPU BMC, and what that means: before any power cycle
    of this run the image waits on each BMC and becomes running at the host's next power cycle,
    whoever causes it (`cycled`: this run's cycle started, its own words say what it activated)."""
    if not staged:
        return "nothing staged"
    left = f"staged on {', '.join(staged)}"
    if cycled:
        return left
    return (
        f"{left} ({version} held by each DPU's BMC, not running: it activates at the host's next "
        "power cycle, whoever causes it)"
    )


def power_cycle_counts(started: bool, cycled_to: int | None) -> tuple[int, int]:
    """What the status counts of the run's one power cycle: `(reboot_attempts,
    power_cycles_issued)`. An attempt from the moment its reboot starts; a power cycle only once
    that reboot has ended (the BMC cycled the host): "1 power cycle" said while the reboot was
    still waiting its turn or powering read as done before it happened (issue 38), so until then
    the line reads `0 power cycles (1 reboot attempt)`, as a host operation's does."""
    return int(started), int(started and cycled_to is not None)
