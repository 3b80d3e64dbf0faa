"""The entity's power watch: a bounded read of the host's power at rest, the base of `HostWorkflow`
(`workflow.py`), split from its runbook by role; the decisions are `power_rest.py`'s.

Every `HostWorkflowInput.power_watch_seconds` (0: no watch; `METALFLOW_POWER_WATCH_SECONDS` for the
entities metalflow's clients start, `contracts/host_entity.py`), while no operation runs and the
host is not in maintenance, the entity resolves the host's BMC and reads its power
(`read_power_state`), after each DPU's BMC (`read_dpu_system`: its reset mark, `LastResetTime`, else
`BootProgress.LastStateTime`). A change since the last reading that no operation of ours explains
(Off at rest, On at rest, a reset of the host or of a DPU: `power_rest.py`) is recorded in the
entity's state (`status().unplanned_power`), the memo entry `unplanned_power` and one
`UnplannedPower` Warning Event on the host's DPUNode (naming the DPU). A read that fails is logged
and skipped; it never fails the entity.

Cost per host per day, at the default 900 s: 96 readings, each one read of the host's BMC (a
session, the Systems collection and the System: 4-5 HTTP requests, `drivers/redfish/power.py`
`read_power`), one read of each DPU's BMC (the same: up to 5 HTTP requests each,
`drivers/redfish/dpu_reset.py` `read_dpu`) and one inventory lookup (the site file, no BMC request);
in history 17 events each plus 6 per DPU (the timer started and fired; workflow tasks, 3 events
each, one per activity plus one; activities, 3 each: inventory, each DPU, the host), measured 29
for a host with two DPUs: ~2,780 a day, so the entity continues-as-new about every 3.6 days at
the default `max_history_events`. One request at a time per BMC, one BMC after the other. During an
operation: nothing (the operation's own reads notice another actor:
`workflows/host_reboot/power_steps.py`). A reboot the entity starts is handed the last reading
(`power_rest.baseline`): its first read that differs says the host was powered by someone else just
before it began. What an ended operation's reads found (its result's `unplanned_power`) is shown as
the last unplanned change (`_operation_found`: the status, the memo; the operation told its own
Event). Cost: no BMC request, one memo upsert.

A host whose power a run's end left unread ("may be OFF": `power_after_end`, the BMC did not
answer) is read again sooner than the watch's period (`HostEntityState.next_power_reading`,
`power_rest.next_reading`): the host's power only, 60 s after that end
(`HostWorkflowInput.power_doubt_seconds`), then 120 s, 240 s, ... after each re-read that is not
answered either, until the delay reaches the period, from when the watch's own readings go on;
the first answer decides (Off: the OFF mark naming that run; anything else: the doubt ends), as does
a later end that says the host's power or `metalflow bmc power` at rest (`power_doubt.py`). The
watch's timer is cut short when such a re-read is due and the timer was not set for it (`_replan`:
a doubt after an end, or maintenance ended in doubt); in maintenance or during an operation no
re-read is planned (it would read nothing).
Cost, only for a host in doubt: per re-read one inventory lookup and one read of the host's BMC
(two tries at most: `BMC_GLANCE`), no DPU BMC read, and 17 history events (the timer, 3 workflow
tasks, 2 activities), one more to cancel the timer the doubt cut short, and one memo upsert when it
is decided; at most 4 re-reads at the default 900 s (60 + 120 + 240 + 480 s), then the watch. A
host in no doubt: nothing more (the same timer, the same readings). While in doubt, `host status`
warns of it (naming the run and `power_read_at`) and `host list` shows `idle (host may be OFF)`
(the memo entry `names.MAYBE_OFF_MEMO`: `_power_memo`).

`metalflow bmc power HOST on|off|cycle` (an operator's power action through metalflow's own CLI,
e.g. the OFF WARNING's advice) tells the entity what it did (signal `power_set`):
at rest it is the new baseline (`power_rest.after_power_set`), so the next reading does not call it
unplanned, and a reading under way when it came is not compared (it may predate the action). The
host seen On clears the OFF mark at once, saying who and when (`powered_on_by_hand`; Off marks nothing). No
cost to a run that uses no such command: one signal (two history events) per command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.models.host import HostWorkflowInput, OperationRecord
    from contracts.models.inventory import HostInventory, HostLookup
    from contracts.models.power_watch import POWER_SET_SIGNAL, PowerSet
    from contracts.models.redfish import DPUSystemState, ReadDPUInput, ReadPowerStateInput, SystemPower
    from workflows import kernel
    from workflows.host.power_rest import after_power_set, after_reading
    from workflows.host.state import HostEntityState
    from workflows.host.takeover_rules import carried, outcome_after_read, power_to_read
    from workflows.phase_upserts import upsert_changed

# One look at the host's BMC whose answer only sharpens words the entity records anyway (its power
# after a run that ended without saying it, `power_after_end`): two tries, then the words say it was
# not read. With BMC_READ's five tries and their backoff, a dead BMC kept the entity busy with the
# ended run for minutes (a campaign waiting on that host waited with it).
BMC_GLANCE: workflow.ActivityConfig = {
    **kernel.BMC_READ,
    "retry_policy": RetryPolicy(maximum_attempts=2, non_retryable_error_types=kernel.NON_RETRYABLE),
}

UNPLANNED_POWER = "unplanned-power"  # the occurrence `kernel.report` hands to Events: UnplannedPower
MEMO_KEY = "unplanned_power"


class PowerWatch(kernel.Runbook):
    """The power watch of a host's entity (module docstring). The workflow sets `state`, `_input`
    and `_reading_power` in its `__init__`."""

    state: HostEntityState
    _input: HostWorkflowInput
    _reading_power: bool
    _power_sets = 0  # `power_set` signals this run took (`power_set`); runtime, not carried

    async def _watch_power(self) -> None:
        """For the whole run: a reading every `power_watch_seconds` while at rest; while a run's end
        left the host's power unread, the host's power sooner (module docstring)."""
        if self._input.power_watch_seconds <= 0:
            return
        while True:
            seconds, host_only = self.state.next_power_reading(workflow.now())
            doubt = (self.state.maybe_off_after, self.state.maybe_off_unanswered) if host_only else None
            try:  # a timer, as a sleep; a doubt to re-read that it was not set for cuts it short
                await workflow.wait_condition(
                    self._replan(doubt),
                    timeout=seconds,
                    timeout_summary=(
                        f"power watch: the host may be OFF after {doubt[0]}: read it again"
                        if doubt
                        else "power watch: next reading at rest"
                    ),
                )
                continue
            except TimeoutError:
                pass
            if self.state.current is not None or self.state.maintenance is not None:
                continue
            self._reading_power = True
            try:
                await self._read_power_at_rest(host_only)
            finally:
                self._reading_power = False

    def _replan(self, doubt: tuple[str, int] | None) -> Callable[[], bool]:
        """Whether to cut the watch's timer short: the host is to be re-read now (a run's end left its
        power unread, or maintenance ended in doubt: `power_reading_plan`) and the timer was not set
        for that re-read (`doubt`: the run and unanswered count it was set for; None: no re-read)."""

        def due() -> bool:
            now = (self.state.maybe_off_after, self.state.maybe_off_unanswered)
            return self.state.power_reading_plan()[1] and now != doubt

        return due

    def _power_memo(self) -> dict[str, Any]:
        """The memo entries of the host's power `host list` reads (the workflow's `_show_phase`
        writes those that changed): the run that left the idle host OFF, the one after which it may be."""
        return {names.LEFT_OFF_MEMO: self.state.left_off(), names.MAYBE_OFF_MEMO: self.state.maybe_off()}

    @workflow.signal(name=POWER_SET_SIGNAL)
    def power_set(self, done: PowerSet) -> None:
        """`metalflow bmc power HOST on|off|cycle` did `done`: at rest, the new baseline (module
        docstring); during an operation or a maintenance nothing (their end sets or forgets it)."""
        self._power_sets += 1
        who = f" ({done.requested_by})" if done.requested_by else ""
        how = f"metalflow bmc power {self.state.host_id} {done.action}{who}"
        self._mark_cleared(self.state.powered_on_by_hand(how, done.power_state, done.at))
        if self.state.current is not None or self.state.maintenance is not None:
            return
        self.state.power = after_power_set(self.state.power, done.power_state, done.at)
        if self.state.power_set_at_rest():  # it said the host's power: no longer "may be OFF"
            workflow.upsert_memo({names.MAYBE_OFF_MEMO: None})
        workflow.logger.info(
            "%s: power %s by metalflow bmc power (%s at %s): planned",
            self.state.host_id,
            done.action,
            done.power_state,
            done.at.isoformat(),
        )

    def _mark_cleared(self, cleared: str) -> None:
        """The OFF mark was cleared (`cleared`: its words; "" it was not): the memo entries `host
        list` and a successor read, and the search attribute, at once."""
        if cleared:
            workflow.logger.info("%s: %s", self.state.host_id, cleared)
            workflow.upsert_memo({names.LEFT_OFF_MEMO: None, names.CARRIED_MEMO: carried(self.state)})
            upsert_changed([names.LEFT_OFF_BY.value_unset()])  # `host list` finds it no more

    def _operation_found(self, words: str) -> None:
        """An ended operation's reads found a power change nobody here made: status and memo."""
        if self.state.found_unplanned(words):
            workflow.upsert_memo({MEMO_KEY: words})

    async def power_after_end(self, record: OperationRecord, outcome: str) -> str:
        """The entity's rule 8 (issue 40: a host is never found off after a run ends unless its
        status says so in words). When a run that can power the host off (reboot, reset, firmware,
        a provision's or reprovision's reboot) ends without its own finaliser having said the
        host's power (terminated by hand; any end whose outcome says neither OFF nor on:
        `takeover_rules.power_to_read`), the host's power is read ONCE before the end is recorded
        (one inventory lookup, no BMC request, and one `read_power_state`: only on such ends, so a
        run that ends as designed costs nothing more), and `outcome` says what it found
        (`outcome_after_read`): Off -> the words of a host left OFF, so `finish` marks the host OFF
        by that run (`left_off_by`: `host list` `(host OFF)`, the WARNING, cleared as every mark);
        On -> as it was; not answered -> "may be OFF" naming the run, and the watch's next reading
        of Off at rest marks it rather than becoming its silent baseline
        (`HostEntityState.off_at_rest_after_unread`). Any other end: `outcome` as it is."""
        if not power_to_read(record.operation, outcome):
            return outcome
        host, run = self.state.host_id, record.workflow_id
        try:
            inventory = await self._inventory(f"resolve {host} (its power after {run})")
            power = await self._power(inventory, BMC_GLANCE, f"read the power of {host} after {run} ended")
        except ActivityError as err:
            return outcome_after_read(outcome, run, host, None, kernel.describe_failure(err))
        return outcome_after_read(outcome, run, host, power.power_state)

    async def _inventory(self, summary: str) -> HostInventory:
        lookup = HostLookup(host_id=self.state.host_id)
        options = kernel.options(kernel.INVENTORY, summary)
        inventory: HostInventory = await self.call(
            activity_api.resolve_host_inventory, lookup, options, abortable=False
        )
        return inventory

    async def _power(
        self, inventory: HostInventory, preset: workflow.ActivityConfig, summary: str
    ) -> SystemPower:
        options = kernel.options(preset, summary)
        power: SystemPower = await self.call(
            activity_api.read_power_state, ReadPowerStateInput(bmc=inventory.bmc), options, abortable=False
        )
        return power

    async def _read_power_at_rest(self, host_only: bool = False) -> None:
        """A reading at rest: each DPU's reset mark, then the host's power; `host_only`: the host's
        power alone, once (`BMC_GLANCE`), a re-read of a host that may be OFF (module docstring)."""
        host, doubt = self.state.host_id, self.state.maybe_off()
        sets = self._power_sets
        try:
            inventory = await self._inventory(f"resolve {host} (power watch)")
            # The DPUs first, the host last: the host's reading is the one an operation starting
            # right after is handed (`power_rest.baseline`), and it is kept once read at rest.
            marks = {} if host_only else await self._read_dpu_marks(inventory)
            preset, what = (
                (BMC_GLANCE, f"read the power of {host} again: it may be OFF after {doubt}")
                if host_only
                else (kernel.BMC_READ, f"read the power of {host} at rest")
            )
            power = await self._power(inventory, preset, what)
        except ActivityError as err:
            workflow.logger.warning("power of %s not read at rest: %s", host, kernel.describe_failure(err))
            self.state.doubt_unread()  # in doubt: the next re-read waits twice as long
            return
        if self.state.current is not None or self.state.maintenance is not None:
            return  # an operation (or a person's maintenance) started meanwhile: the power is theirs
        if self._power_sets != sets:
            return  # `metalflow bmc power` acted meanwhile: this reading may predate it (its baseline holds)
        marked = self.state.off_at_rest_after_unread(power.power_state)  # an end read nothing
        if marked:  # the memo entries and search attribute `host list` and a successor read, at once
            workflow.logger.warning("%s: %s", host, marked)
            off = self.state.left_off_by
            memo = {
                names.LEFT_OFF_MEMO: off,
                names.MAYBE_OFF_MEMO: None,
                names.CARRIED_MEMO: carried(self.state),
            }
            workflow.upsert_memo(memo)
            upsert_changed([names.LEFT_OFF_BY.value_set(off)])
        elif doubt and self.state.maybe_off() is None:  # read, not Off: the doubt ends (`host list`)
            workflow.upsert_memo({names.MAYBE_OFF_MEMO: None})
        self._mark_cleared(self.state.read_at_rest(power.power_state, workflow.now()))
        self.state.power, words = after_reading(
            host, self.state.power, power.power_state, power.last_reset_time, workflow.now(), marks
        )
        if words:
            workflow.upsert_memo({MEMO_KEY: words})
            kernel.report(UNPLANNED_POWER, words)

    async def _read_dpu_marks(self, inventory: HostInventory) -> dict[str, str]:
        """Each DPU BMC's reset mark, by DPU id, one read each (`read_dpu_system`), one after the
        other ("": its BMC shows none); a DPU without a BMC in the inventory, whose read fails
        (logged) or whose Arm OS is not running (booting, Paused, its host Off: its boot stage time
        moves as it boots) is left out (its mark before is kept: `power_rest.after_reading`)."""
        marks: dict[str, str] = {}
        for dpu in inventory.dpus:
            if dpu.bmc is None or self.state.current is not None or self.state.maintenance is not None:
                continue
            try:
                read: DPUSystemState = await self.call(
                    activity_api.read_dpu_system,
                    ReadDPUInput(bmc=dpu.bmc),
                    kernel.options(kernel.BMC_READ, f"read the reset mark of DPU {dpu.id} at rest"),
                    abortable=False,
                )
            except ActivityError as err:
                workflow.logger.warning("DPU %s not read at rest: %s", dpu.id, kernel.describe_failure(err))
                continue
            if read.os_running:  # a booting Arm moves its stage time: compared once it runs
                marks[dpu.id] = read.reset_mark or ""  # a mark that appears later is a reset too (B9)
        return marks
