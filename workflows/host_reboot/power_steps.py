"""How a reboot drives the host's power under its BMC lease: the base of `HostRebootWorkflow`
(`workflow.py`), split from its runbook by role.

- `_force_off_then_on` (a re-issued reboot, `force_off`): ForceOff, the power-down wait watched
  as below (`_power_down_wait`; a stop cuts it), On.
- `_cycle_once`: `power_cycle_host`, a long power-down wait handed back at Off and waited on a
  durable timer, then the activity again to send On.
- `_power_down_wait`: the handed-back wait (and the ForceOff path's), watched: a durable timer
  up to each read point of `failure.power_down_reads` (every `OperationPolicy.
  power_down_read_seconds`, 30 s by default; none at the wait's end, where the On step reads
  anyway), then one `read_power_state`, bounded;
  an On found ends the wait at once (`_taken_over`; `failure.seen_on_words` says when our read
  saw it and the read before that still saw Off, never "On at" the read's time), an Off updates
  the details (`host status`: `power-down wait: HOST is Off since T1Z (read T3Z), On at T2Z`,
  `failure.power_down_words`: times, not "On in N s", which a worker restarted midway replayed
  as new; T2Z is when our On is due), a read that fails is logged and the wait goes on. A caller
  that listens (`tell_parent`: a host operation, a firmware run, a reset) is signalled once as
  the wait begins, with the same words (`_tell_parent`), for its own current details. Cost:
  `ceil(wait / 30 s) - 1` BMC reads per reboot (3 at the 120 s default, 9 for
  `--power-down-wait 300`), each 4-5 HTTP requests, and about 11 history events (its timer, the
  activity, their workflow tasks), only on a BMC without PowerCycle or in a re-issued reboot's
  ForceOff then On; the signal: +5 events here, +4 there.
- `_taken_over`: another actor turned the host On after our ForceOff took it Off (within
  `set_power`'s settle, during the wait, or found by the resumed cycle): the one decision of
  `failure.decide_on_power_taken_over` (the Off-On is the cycle; nothing more sent, never a
  ForceOff again), said in the details, the result (`unplanned_power`) and an `UnplannedPower`
  Warning Event (`kernel.report`). Cost: no BMC request beyond the steps' own (the settle's
  reads, the wait's reads, the On's read that found the host On, the resumed cycle's first read).
- `_found_before`: the cycle's first read differs from the entity's last reading at rest
  (`failure.decide_on_power_found`: someone else powered the host just before the reboot): said
  the same three ways; the reboot goes on. Cost: nothing (the cycle's own first read).

The workflow sets every attribute declared here in its `__init__`.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api
    from contracts.models.host import HostRebootInput
    from contracts.models.inventory import HostInventory
    from contracts.models.power_watch import ITS_REBOOT_NOW_SIGNAL, RebootNow
    from contracts.models.redfish import (
        PowerCycleInput,
        PowerCycleResult,
        ReadPowerStateInput,
        SetPowerInput,
        SetPowerResult,
        SystemPower,
    )
    from contracts.wording import cut_short_words, iso_z
    from workflows import kernel
    from workflows.host_reboot.failure import (
        UNPLANNED_POWER,
        decide_on_power_found,
        decide_on_power_taken_over,
        owed_since,
        power_down_reads,
        power_down_words,
        seen_on_words,
    )
    from workflows.parts.host_power import PowerCustody
    from workflows.parts.power_cycle_options import POWER_DOWN_HAND_BACK_SECONDS, power_cycle_options

Power = tuple[str, tuple[str, ...]]  # how the host was cycled, and the resets sent


class PowerSteps(kernel.Abortable):
    """The power steps of a reboot (module docstring)."""

    _request: HostRebootInput
    _power: PowerCustody
    _stopping: bool
    _cycle_activity: asyncio.Future[PowerCycleResult] | None
    _already_done: bool
    _stop_sent_on: bool
    _cancelled: bool  # the stop is its cancel's (`cut_short_words`)
    _handed_back: bool
    _unplanned: str
    # The host's LastResetTime as the last power step read it, moved by that step (the result's
    # `last_reset_time`, the entity's baseline at rest); None: unknown, or an On by another actor.
    _last_reset: datetime | None
    _told_off: bool  # its caller was told it waits for a person with the host OFF

    async def _force_off_then_on(self, inventory: HostInventory) -> Power:
        self._power.turned_off(f"ForceOff of its reboot to generation {self._request.boot_generation}")
        off = await self._set_power(inventory, "ForceOff", report_reversal=True)
        sent = () if off.sent is None else (off.sent,)
        if off.reversed_to is not None:  # Off, then On again within the settle: not by us
            return self._taken_over(
                f"{off.reversed_to} seconds after our ForceOff took it Off", "ForceOff", sent
            )
        seconds = self._request.policy.power_down_wait_seconds
        if seconds > 0 and not self._stopping:  # watched durable timers, cut short by a stop
            seen_on = await self._power_down_wait(inventory, seconds, workflow.now())
            if seen_on is not None:  # another actor's On: the cycle, decided once; no On sent
                return self._taken_over(seen_on, "ForceOff", sent)
        on = await self._set_power(inventory, "On")
        self._power.seen_on()
        if on.sent is None and not self._stopping:  # it held On already: someone else's On
            return self._taken_over("On before our On, during the power-down wait", "ForceOff", sent)
        return "ForceOff+On", tuple(r.sent for r in (off, on) if r.sent is not None)

    async def _cycle_once(self, inventory: HostInventory) -> Power:
        """`power_cycle_host`; a power-down wait longer than `POWER_DOWN_HAND_BACK_SECONDS`
        is handed back at Off and waited here on a durable timer (a stop cuts it), then the
        activity is called again from where it left off to send On."""
        request = self._request
        wait = request.policy.power_down_wait_seconds
        cycle_input = PowerCycleInput(
            bmc=inventory.bmc,
            boot_generation=request.boot_generation,
            requested_at=owed_since(request, workflow.info().start_time),
            power_down_wait_seconds=wait,
            hand_back_wait_over_seconds=POWER_DOWN_HAND_BACK_SECONDS,
            warm=request.warm,
        )
        summary = f"power cycle {request.host_id} to generation {request.boot_generation}"
        cut = ""  # what the result's method says of a wait a stop cut short
        while True:
            # Its own handle, not `self.call`: a stop cancels it only once the host is Off
            # (`_stop_cycle`), and must know it stopped before On.
            self._cycle_activity = kernel.start_cancellable(
                activity_api.power_cycle_host,
                cycle_input,
                kernel.options(power_cycle_options(wait), summary),
            )
            cycle: PowerCycleResult = await self._cycle_activity
            self._cycle_activity = None
            self._last_reset = cycle.last_reset_time
            self._found_before(cycle.first_power_state)  # the first activity's first read only
            if cycle.wait_left_seconds <= 0 or cycle.progress is None:
                self._already_done = cycle.already_done
                if cycle.turned_on_by_other:
                    seen = "On before our On, during the power-down wait"
                    return self._taken_over(seen, cycle.method, cycle.reset_types)
                return f"{cycle.method}{cut}", cycle.reset_types
            if self._stop_sent_on:  # a stop saw the host Off and sent On itself
                raise asyncio.CancelledError
            self._handed_back = True
            off_since = cycle.off_reached_at or workflow.now()  # the activity's read of Off
            seen_on = await self._power_down_wait(inventory, cycle.wait_left_seconds, off_since)
            if seen_on is not None:  # another actor's On: the cycle, decided once; no On sent
                return self._taken_over(seen_on, cycle.method, cycle.reset_types)
            if self._stopping:
                cut = cut_short_words(self._cancelled)
            # On now: the timer (or a stop) covered the wait; `off_reached` is in the history.
            cycle_input = cycle_input.model_copy(
                update={"resume": cycle.progress, "power_down_wait_seconds": 0.0,
                        "hand_back_wait_over_seconds": None}
            )  # fmt: skip
            summary = f"power {request.host_id} back on (generation {request.boot_generation})"

    async def _power_down_wait(
        self, inventory: HostInventory, seconds: float, off_since: datetime
    ) -> str | None:
        """The handed-back power-down wait of `seconds` (what is left of it since the host was
        Off at `off_since`), watched (module docstring): when an On by someone else was read, in
        words; None once the wait is over or a stop cut it. Its timer is durable: a worker
        restarted midway waits out the rest, from the same Off."""
        host, every = self._request.host_id, self._request.policy.power_down_read_seconds
        reads = power_down_reads(seconds, every)
        watched = f"; its power read every {every:g} s" if reads else ""
        began = workflow.now()
        on_at, off_read = began + timedelta(seconds=seconds), off_since
        words = power_down_words(host, off_since, on_at, "", watched)
        self.show(words)
        await self._tell_parent(words)
        for at in (*reads, seconds):
            timeout = at - (workflow.now() - began).total_seconds()
            if not self._stopping and timeout > 0:  # cut short by a stop
                await self.wait(
                    lambda: self._stopping,
                    timeout=timeout,
                    timeout_summary=f"power-down wait: {host} stays off before On",
                    abortable=False,
                )
            if self._stopping or at >= seconds:
                return None
            found = await self._read_during_wait(inventory, bound=max(5.0, min(every, seconds - at)))
            now = workflow.now()
            into = (now - began).total_seconds()
            if found == "On":
                return seen_on_words(now, off_read, into, seconds)
            off_read = now if found == "Off" else off_read
            read = f"read {iso_z(now)}" if found else "not read"
            self.show(power_down_words(host, off_since, on_at, read, watched))
        return None

    async def _tell_parent_of_person(self) -> None:
        """Its wait for a person, told to a caller that listens (`tell_parent`: a firmware run,
        whose reboot waits for a person itself) when the host is OFF (manual-intervention-required:
        the caller's Phase says it, so `host list` shows it as a reboot's or a reset's own; issue
        40), and once more when a failed retry left it waiting with the host on (the caller's
        Phase is its own again). A manual reboot's wait, the host never off by us, tells nothing.
        Cost: one signal per such change (+5 events here, +4 there)."""
        told, self._told_off = self._told_off, self._power.is_off
        if told or self._told_off:
            await self._tell_parent(self.details)

    async def _tell_parent(self, details: str) -> None:
        """A caller that listens (`tell_parent`) hears what this reboot waits for now, for its own
        current details (`parts/reboot_rounds.py`: one signal per wait, its cost). Only words: a
        caller that cannot be told (gone, ended) changes nothing here (logged)."""
        parent = workflow.info().parent
        if not self._request.tell_parent or parent is None:
            return
        now = RebootNow(reboot_id=workflow.info().workflow_id, phase=self.phase, details=details)
        try:
            caller = workflow.get_external_workflow_handle(parent.workflow_id, run_id=parent.run_id)
            await caller.signal(ITS_REBOOT_NOW_SIGNAL, now)
        except Exception as err:  # noqa: BLE001 - words for the caller's page, never this reboot's end
            workflow.logger.info("%s not told of %s: %s", parent.workflow_id, self.phase, err)

    async def _read_during_wait(self, inventory: HostInventory, *, bound: float) -> str:
        """One bounded `read_power_state` during the power-down wait: its PowerState, or "" when it
        failed (logged; the wait goes on, the On step reads the host anyway)."""
        host = self._request.host_id
        try:
            power: SystemPower = await self.call(
                activity_api.read_power_state,
                ReadPowerStateInput(bmc=inventory.bmc),
                kernel.options(kernel.bounded(kernel.BMC_READ, bound), f"is {host} still Off? (power-down)"),
                abortable=False,  # a stop cuts the wait after it, at most `bound` later
            )
        except ActivityError as err:
            why = kernel.describe_failure(err)
            workflow.logger.warning("power of %s not read in its power-down wait: %s", host, why)
            return ""
        return power.power_state

    def _found_before(self, found: str) -> None:
        """The cycle's first read against the entity's last reading at rest: a difference nobody
        here made (`decide_on_power_found`) is said in the details, the result and an Event."""
        request = self._request
        words = decide_on_power_found(request.host_id, request.boot_generation, request.power_before, found)
        if words is None:
            return
        self._said_unplanned(words)

    def _said_unplanned(self, words: str) -> None:
        self._unplanned = f"{self._unplanned}; {words}" if self._unplanned else words
        self.show(words)
        kernel.report(UNPLANNED_POWER, words)

    def _taken_over(self, seen: str, method: str, sent: tuple[str, ...]) -> Power:
        """Another actor turned the host On after our ForceOff took it Off (`seen`: when): the one
        decision (module docstring); the reboot then ends as done, nothing more sent."""
        self._power.seen_on()
        self._last_reset = None  # their On: its mark may still move, not a baseline of ours
        request = self._request
        self._said_unplanned(decide_on_power_taken_over(request.host_id, request.boot_generation, seen))
        return f"{method}, On by another actor", sent

    async def _set_power(
        self, inventory: HostInventory, reset_type: str, *, report_reversal: bool = False
    ) -> SetPowerResult:
        """One `set_power_state`, not abortable: a stop never leaves a ForceOff without its On."""
        result: SetPowerResult = await self.call(
            activity_api.set_power_state,
            SetPowerInput(bmc=inventory.bmc, reset_type=reset_type, report_reversal=report_reversal),
            kernel.options(kernel.BMC_READ, f"{reset_type} {self._request.host_id}"),
            abortable=False,
        )
        self._last_reset = result.last_reset_time
        return result
