"""A reboot barrier that waits on DPF's own step says so within minutes: `OwedWait`.

Why (issue 36ae): a reprovision waited in `waiting-for-reboot-request` with every DPU in
`Rebooting`, DPF's request on the DPUNode, and one DPU not stamped by DPF (its Step 2): the
barrier rightly did not reboot (a removal before the stamp is undone, `dpf_barrier.dpf_step_owed`),
but it said nothing until the phase timeout (3600 s), restarted by every DPF change. Upstream
DPF takes such a step at its next reconcile (seconds); a wait on it longer than
`policy.dpf_step_seconds` (plus DPF's own bound, the Arm shutdown's 300 s) is overdue.

The rule: the same owed step (`Owed.key`: what, and which DPUs) held continuously since `since`
is said once, `dpf_step_seconds` (+ its grace) after `since`: in the operation's details (the
status "now" line, which keeps it while the step stays owed) and as a Warning Event
(`dpf-step-overdue`, `DPFStepOverdue`). Another step owed, or none, starts over. The wait goes on:
the phase timeout still asks an operator. DPF changes that do not change what is owed do not
move `since` (the timer the wait sets is the rest of the bound, not a new one).

Pure: no Temporal, no clock (the time is an argument); tests/fast/test_dpf_owed.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from contracts.models.dpf import HostDPFState
from workflows.parts import dpf_barrier as barrier

DPF_STEP_OVERDUE = "dpf-step-overdue"
"""The occurrence `kernel.report` hands to Events: `DPFStepOverdue` (Warning)."""


@dataclass
class OwedWait:
    """The step DPF owes the barrier now, since when, and whether it was said."""

    key: tuple[str, ...] = ()
    since: datetime | None = None
    words: str = ""
    grace: float = 0.0
    said: str = ""  # the words said (the details keep them while the step stays owed)

    def take(
        self, dpf: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str], now: datetime
    ) -> None:
        """A new state: what DPF owes in it (`dpf_barrier.dpf_step_owed`); the same step keeps its
        start, another (or none) starts over."""
        owed = barrier.dpf_step_owed(dpf, dpu_ids, replaced)
        if owed is None:
            self.clear()
            return
        if owed.key != self.key:
            self.key, self.since, self.said = owed.key, now, ""
        self.words, self.grace = owed.words, owed.grace

    def clear(self) -> None:
        self.key, self.since, self.words, self.grace, self.said = (), None, "", 0.0, ""

    def due_in(self, now: datetime, bound: float) -> float | None:
        """Seconds until the owed step is overdue; None when nothing is owed or it was said."""
        if self.since is None or self.said:
            return None
        due = self.since + timedelta(seconds=bound + self.grace)
        return max((due - now).total_seconds(), 0.0)

    def overdue(self, now: datetime, bound: float) -> str | None:
        """The words to say now, once: the owed step is overdue. None: not (yet), or said."""
        left = self.due_in(now, bound)
        if left is None or left > 0 or self.since is None:
            return None
        waited = (now - self.since).total_seconds()
        self.said = (
            f"DPF has not moved for {waited:.0f} s (since {self.since.isoformat(timespec='seconds')}): "
            f"{self.words}. Check DPF's provisioning controller; the wait goes on until the phase timeout"
        )
        return self.said

    def shown(self) -> str:
        """What the details add while the overdue step stays owed ("" otherwise)."""
        return f"; {self.said}" if self.said else ""
