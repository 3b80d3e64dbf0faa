"""The doubt after a run's end whose power read was not answered ("may be OFF", issue 40): the part
of the host entity's state (`HostEntityState` inherits `PowerDoubt`) that says while the host may
be OFF, when the power watch reads it again and what decides it. Split from state.py by meaning.
Its data are `HostEntityMemory`'s `maybe_off_after`, `maybe_off_unanswered` and `power_read_at`.

- It begins at an end whose outcome says "may be OFF" (`takeover_rules.outcome_after_read`).
- It ends when something says the host's power (`doubt_after_end`, `off_at_rest_after_unread`,
  `power_set_at_rest`): a later end that says OFF (the OFF mark) or on, that reached a boot
  generation, or whose own end read was answered; a reading at rest that answered (Off: the OFF mark
  naming the run); `metalflow bmc power` at rest. An end that says nothing of it (a request withdrawn
  or expired unstarted, a removal, a reset of DPUs only: `POWER_NOT_TOUCHED`, a completed run that
  powered nothing) leaves it: before, any end cleared it and the host read `idle` again in silence.
- While the host is idle and out of maintenance, the watch re-reads it with a backoff
  (`power_rest.next_reading`; `power_reading_plan`, `doubt_unread`).

Pure: no Temporal, no clock (`now` is an argument), no I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from contracts.models.host import HostWorkflowInput, Maintenance, OperationRecord, PendingOperation
from workflows.host.power_rest import next_reading
from workflows.host.takeover_rules import MAYBE_OFF, power_to_read
from workflows.parts.host_power import HOST_IS_OFF, HOST_IS_ON


class PowerDoubt:
    """The "may be OFF" doubt of the entity's state (see the module docstring)."""

    if TYPE_CHECKING:
        _start: HostWorkflowInput
        current: PendingOperation | None
        maintenance: Maintenance | None
        left_off_by: str
        maybe_off_after: str
        maybe_off_unanswered: int
        power_read_at: datetime | None

    def doubt_after_end(self, record: OperationRecord, outcome: str, ran: bool, cycled: bool) -> None:
        """`record`'s run ended with `outcome` (`ran`: it started; `cycled`: it reached a boot
        generation): its own doubt when its end read was not answered (the backoff afresh), none
        when its end says the host's power, else the doubt as it was (module docstring)."""
        if MAYBE_OFF in outcome:
            self.maybe_off_after, self.maybe_off_unanswered = record.workflow_id, 0
            return
        read_on = ran and power_to_read(record.operation, outcome)  # read at its end: not Off, not unread
        if HOST_IS_OFF in outcome or HOST_IS_ON in outcome or cycled or read_on:
            self.maybe_off_after, self.maybe_off_unanswered = "", 0

    def off_at_rest_after_unread(self, power_state: str | None) -> str:
        """A power watch reading at rest after a run whose end had the host's power read and not
        answered (`maybe_off_after`): Off marks the host OFF by that run (the WARNING, `host list`'s
        `(host OFF)`), not a silent baseline; anything read ends the doubt. The words of the mark
        ("" none made). None (not read): the doubt stays for the next reading."""
        run = self.maybe_off_after
        if not run or power_state is None:
            return ""
        self.maybe_off_after, self.maybe_off_unanswered = "", 0
        if power_state != "Off" or self.current is not None:
            return ""
        self.left_off_by = run
        return f"the host read Off at rest after {run}, whose end left its power unread: OFF as it left it"

    def power_set_at_rest(self) -> bool:
        """`metalflow bmc power HOST on|off|cycle` at rest said the host's power (a person's action
        through our own CLI): the doubt ends, and an Off it left is theirs, not the run's. True when
        there was one."""
        had = bool(self.maybe_off_after)
        self.maybe_off_after, self.maybe_off_unanswered = "", 0
        return had

    def maybe_off(self) -> str | None:
        """The run whose end had the host's power read and not answered ("may be OFF"), while the host
        is idle: `host status` warns of it and `host list` shows `idle (host may be OFF)` (the memo
        entry `names.MAYBE_OFF_MEMO`), until something decides it (module docstring)."""
        return self.maybe_off_after if self.current is None and self.maybe_off_after else None

    def power_reading_plan(self) -> tuple[float, bool]:
        """The power watch's next reading (`power_rest.next_reading`): in how many seconds and
        whether it reads the host's power only (a doubt's re-read: none while busy or in
        maintenance, whose timers would read nothing)."""
        doubt = (self.maybe_off() if self.maintenance is None else None) or ""
        every, first = self._start.power_watch_seconds, self._start.power_doubt_seconds
        return next_reading(every, first, doubt, self.maybe_off_unanswered)

    def next_power_reading(self, now: datetime) -> tuple[float, bool]:
        """`power_reading_plan`, its time kept (`power_read_at`: `host status` says when)."""
        seconds, host_only = self.power_reading_plan()
        self.power_read_at = now + timedelta(seconds=seconds)
        return seconds, host_only

    def doubt_unread(self) -> None:
        """A reading at rest not answered while the host may be OFF: the next re-read waits twice as long."""
        if self.maybe_off_after:
            self.maybe_off_unanswered += 1
