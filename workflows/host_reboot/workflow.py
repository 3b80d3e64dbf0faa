"""HostRebootWorkflow: one host reboot per boot generation (`reboot/<id>/generation-<n>`).

Runbook:
1. Method `bmc`: power-cycle through the host's BMC. `power_cycle_host` cycles exactly once per
   generation across retries (PowerCycle where the BMC can prove it, else ForceOff then On);
   `force_off` (a re-issued reboot) sends ForceOff, waits `power_down_wait_seconds` on durable
   timers reading the power between them (an On by another actor is the cycle), then On.
   `warm` (DPF asked for a method lesser than PowerCycle) asks for a warm ForceRestart where the
   BMC can prove it; `owed_since` (when DPF asked) makes a reset someone
   else made since then count as this reboot (`already_done`: nothing sent).
2. Method `manual`, or the BMC path failed for good (unreachable after the activity's retries,
   bad credentials, a rejected reset): wait for the update `host_rebooted` (or `mark_rebooted`,
   or the older signal) from whoever rebooted the host, or `retry` (the cycle again); the Phase
   names what the BMC answered. A caller that escalates on its own (`escalate_bmc_failure`, a
   host operation) gets the failure `BMCRebootFailed` instead, naming the same reason.
3. A cycle that failed after its ForceOff (the error's `power_cycle_step`) left the host off:
   never in silence (`workflows/parts/host_power.py`). On again after a backoff, then Phase
   `manual-intervention-required` says the host is OFF: `retry` sends On (the reboot completes),
   `host-rebooted` is taken only once the BMC shows it On, `abort` ends saying it is OFF.
4. An operator's reboot (not a round of another operation) on the BMC path reads DPF before its
   cycle; when the host's DPUs waited in `Rebooting` for an external reboot (an aborted
   reprovision left them so), it removes DPF's reboot-required annotation after the cycle, as
   the reprovision would have (`dpf_told.py`, DOMAIN.md 2.5); the result's `dpf_told` says so.

The id is the idempotency key: starters use `WorkflowIDReusePolicy.REJECT_DUPLICATE`, so asking
twice for one generation reboots once.

Stopping (a cancel, e.g. the operation's abort or its parent closing; or this workflow's own
update `abort`): never leaves the host off, never waits out `power_down_wait_seconds` either.
The power-down wait is cut and On sent at once; during `power_cycle_host` the BMC is read (every
`STOP_POLL_SECONDS`) until the host is seen Off, then the activity is cancelled (and awaited) and
On sent; a cycle that ends first simply ends. A manual wait just ends. Queued for the BMC's
lease, the place is given back and nothing is sent. Cancelled, it completes with its result when
the host was cycled (the canceller must know; a cancel's On after our ForceOff the BMC took is that
cycle's On: `_cycled_by_cancel`), else ends cancelled (failed `HostLeftOff`, saying
so, when the host is still OFF by its hand: a cancel carries no words). Aborted, it completes (Phase
`aborted`: asked for, no Failed run), its result's `aborted` saying who, why and whether the
host was cycled, `boot_generation` the generation reached.

The BMC path holds a slot of the BMC's fleet-wide lease (`workflows/bmc_lease/workflow.py`) around
the cycle. One activity, `lease_host_bmc` (`BMCLeaseHolder.ask_for_host`, as a reset), reads the
inventory and asks for the slot (on a busy worker the tasks before the cycle are most of DPF's
ask-to-reset time); a BMC at its limit answers "queued" and the run waits for the grant signal,
holding no activity slot. A cancel or abort during the step waits for it and gives back the slot.
Every early end goes through the kernel's `to_the_end`: the final phase names what ended it,
whether the generation was reached, and a host left OFF.

Cost: one activity slot during the cycle, none while queued or waiting for a person. The history
is small and bounded: the step, the cycle (one activity; a power-down wait past
`POWER_DOWN_HAND_BACK_SECONDS` adds its durable timer and a second `power_cycle_host`, and a
timer and a `read_power_state` per `power_down_read_seconds` of it, as does the `force_off`
path's wait: `power_steps.py`), the
lease's release on a shared BMC; a stop adds at most `STOP_POLLS` x (one power read + one timer),
then a cancellation and an On. Measured: bench/README.md, "workflows/host_reboot/workflow.py".
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.errors import BMCRebootFailed, HostLeftOff, OperationAborted, WorkflowError, cause_in_words
    from contracts.models.bmc_lease import (
        BMC_LEASE_GRANTED_SIGNAL,
        LeaseGrant,
        LeaseHolder,
        RequestLeaseResult,
    )
    from contracts.models.control import RETRY_UPDATE, OperatorAnswer, OperatorRequest
    from contracts.models.host import (
        HOST_REBOOTED_SIGNAL,
        HOST_REBOOTED_UPDATE,
        MANUAL_INTERVENTION_REQUIRED,
        MARK_REBOOTED_UPDATE,
        HostRebootInput,
        HostRebootResult,
        RebootMethod,
    )
    from contracts.models.inventory import HostInventory
    from contracts.models.redfish import PowerCycleResult, ReadPowerStateInput, SystemPower
    from contracts.operator_answers import Answered, second_answer_refusal
    from contracts.wording import BY_ITS_CANCEL, cut_short_words, reboot_cancel_words
    from workflows import kernel
    from workflows.host_reboot.dpf_told import TellsDPF
    from workflows.host_reboot.failure import bmc_failure_reason, off_step
    from workflows.host_reboot.power_steps import PowerSteps
    from workflows.parts import boot_generation
    from workflows.parts.bmc_lease_holder import BMCLeaseHolder, withdrawn_words
    from workflows.parts.host_power import PowerCustody
    from workflows.parts.site_check_said import SiteCheckSaid

POWERING = "powering"
POWER_CYCLED = "power-cycled"  # reported (no phase) once the BMC took the cycle, never before
WAITING_FOR_MANUAL_REBOOT = "waiting-for-manual-reboot"
REBOOTED = "rebooted"
STOP_POLL_SECONDS = 2.0  # how often a stop reads the BMC while power_cycle_host has not turned it off
STOP_POLLS = 20  # then the cycle is simply awaited (it is past its Off-to-On wait by then)

Cycle = asyncio.Future[tuple[str, tuple[str, ...]]]  # the cycle under the lease: its method and resets


@workflow.defn(name="HostRebootWorkflow")
class HostRebootWorkflow(SiteCheckSaid, PowerSteps, TellsDPF):
    """Reboot a host once for one boot generation."""

    ENDED: ClassVar = (REBOOTED, "failed", "aborted", "cancelled")

    @workflow.init
    def __init__(self, request: HostRebootInput) -> None:
        super().__init__()
        self._request = request
        self.site_check = request.site_check  # said by its phases (`SiteCheckSaid`)
        self._confirmation: OperatorRequest | None = None
        self._waiting_for_person = False
        self._leases = BMCLeaseHolder()
        self._stopping = False  # cut the power-down wait, stop the cycle activity once Off
        self._cycle_activity: asyncio.Future[PowerCycleResult] | None = None
        self._already_done = False  # the BMC showed a reset since the reboot became owed
        self._stop_sent_on = False  # `_stop_cycle` took over: the cycle must not send On too
        self._cancelled = False  # cancelled in Temporal during its cycle: its record says so
        self._handed_back = False  # the cycle's activity returned at Off: the cycle sends On itself
        self._cycled: HostRebootResult | None = None  # the host was power-cycled for this generation
        # The host is off by this run's hand (a cycle that failed after ForceOff): powered on, or
        # handed to a person told it is OFF, before the run ends (`workflows/parts/host_power.py`).
        self._power = PowerCustody(
            host_id=request.host_id, retry_delays=request.policy.power_on_retry_seconds
        )
        self._inventory: HostInventory | None = None  # the BMC path's host: what `retry` powers
        self._dpf_waiting = None  # DPF waited for a reboot before the cycle (`dpf_told.py`)
        self._dpf_told = ""  # what telling DPF did, in the final words and the result
        self._retry: OperatorRequest | None = None
        self._retry_taken: Answered | None = None  # who retried and when (`answer_taken`)
        self._why = ""  # what the BMC did on the last retry that failed
        self._unplanned = ""  # another actor turned the host On during our power-down: in words
        self._last_reset = None  # LastResetTime as the last power step read it (`PowerSteps`)
        self._told_off = False  # its caller was told it waits for a person, the host OFF
        # A reboot the host's entity started (`host reboot`), or one started alone, is an
        # operation; a reboot round of another (its parent a reprovision, a firmware update or a
        # reset) is that operation's step, not counted apart.
        parent = workflow.info().parent
        if parent is None or parent.workflow_id == names.host_workflow_id(request.host_id):
            self.operation_kind = names.REBOOT

    @workflow.run
    async def run(self, request: HostRebootInput) -> HostRebootResult:
        """Reboot the host; see the module docstring. A run whose cycle the BMC took completes
        with its result however it ends (a cancel too): its generation is reached, and a run that
        ends otherwise leaves its generation free for the next cycle (`boot_generation.spent`)."""
        try:
            return await self.to_the_end(self._reboot, self._clean_up)
        except (asyncio.CancelledError, CancelledError):
            if self._cycled is None:
                raise
            return self._cycled.model_copy(update={"finished_at": workflow.now()})

    async def _reboot(self) -> HostRebootResult:
        request = self._request
        kernel.upsert_changed(  # none: `start_next_reboot` gives them at start
            [names.HOST_ID.value_set(request.host_id), names.OPERATION.value_set(names.REBOOT)]
        )
        if request.policy.reboot_method == RebootMethod.MANUAL:
            return await self._wait_for_manual_reboot("the reboot method is manual")
        inventory, asked = await self._leases.ask_for_host(
            request.host_id,
            request.boot_generation,  # a one-host BMC: no lease
            f"resolve the BMC of {request.host_id} and ask its lease for a slot",
        )
        await self._dpf_waits(inventory)
        if self.aborting:
            await self._leases.give_back(asked[1], asked[0])
            raise self.aborted()
        self._inventory = inventory
        try:
            method, resets = await self._power_cycle(inventory, asked)
        except ActivityError as err:
            why = bmc_failure_reason(request.host_id, err)
            if await self._powered_on_after(err):
                return await self._rebooted("ForceOff+On (On sent again after the cycle failed)", ())
            if request.escalate_bmc_failure:
                off = f"; {self._power.left()}" if self._power.is_off else ""
                raise BMCRebootFailed(f"{why}{off}") from err
            return await self._wait_for_manual_reboot(why)
        return await self._rebooted(method, resets)

    async def _rebooted(self, method: str, resets: tuple[str, ...]) -> HostRebootResult:
        request = self._request
        self._cycled = HostRebootResult(
            host_id=request.host_id,
            boot_generation=request.boot_generation,
            method=f"bmc:{method}",
            reset_types=resets,
            finished_at=workflow.now(),
            already_done=self._already_done,
            unplanned_power=self._unplanned,
            last_reset_time=self._last_reset,
            cancelled=reboot_cancel_words(method, self._cancelled),
        )
        if not self._already_done:  # the BMC took the cycle: the worker's `PowerCycleIssued` Event
            kernel.report(
                POWER_CYCLED,
                f"power cycle ({method}) for generation {request.boot_generation}",
                warning=False,
            )
        await self._tell_dpf()
        if self._dpf_told:
            self._cycled = self._cycled.model_copy(update={"dpf_told": self._dpf_told})
        if self.aborting:
            raise self.aborted()
        told = f"; {self._dpf_told}" if self._dpf_told else ""
        await self.finish(REBOOTED, f"generation {request.boot_generation} by {method}{told}")
        return self._cycled.model_copy(update={"finished_at": workflow.now()})

    async def _clean_up(self, err: BaseException) -> str:
        """What an early end leaves: the cycle was stopped already (never left off, never cut
        between Off and On), a queued place given back; so only whether the generation was reached.
        A cancel (the operation's abort, the entity gone, `temporal workflow cancel`) of a run that
        left the host OFF, a person asked or not, tries On afresh: nobody is left to ask."""
        generation = self._request.boot_generation
        if self._cycled:
            return f"The host was power-cycled: boot generation {generation} reached"
        if isinstance(err, asyncio.CancelledError | CancelledError) and self._power.cancelled():
            if await self._powered_on_after(None):  # our ForceOff, then this On: the BMC cycled it
                self._cycled = self._cycled_by_cancel()
                cycled = "The host was power-cycled (our ForceOff, the On its cancel sent)"
                return f"{cycled}: boot generation {generation} reached"
        if self._power.is_off:
            return f"Boot generation {generation} not reached; {self._power.left()}"
        return f"Boot generation {generation} not reached"

    def _cycled_by_cancel(self) -> HostRebootResult:
        """The result of a run whose cancel powered the host on after its ForceOff: that is a power
        cycle the BMC took, so the run completes with its generation (`boot_generation.spent`)."""
        kernel.report(POWER_CYCLED, f"power cycle (ForceOff, On by its cancel) for generation "
                      f"{self._request.boot_generation}", warning=False)  # fmt: skip
        return HostRebootResult(
            host_id=self._request.host_id, boot_generation=self._request.boot_generation,
            method=f"bmc:ForceOff+On {BY_ITS_CANCEL}", reset_types=("ForceOff", "On"),
            finished_at=workflow.now(), unplanned_power=self._unplanned,
            cancelled=reboot_cancel_words(BY_ITS_CANCEL, True),
        )  # fmt: skip

    # -- messages ------------------------------------------------------------------------------------
    @workflow.signal(name=HOST_REBOOTED_SIGNAL)
    def host_rebooted(self, confirmation: OperatorRequest) -> None:
        """Someone rebooted the host (the first counts); not taken while it is off by our hand."""
        if self._power.is_off:
            workflow.logger.warning("signal %s ignored: %s", HOST_REBOOTED_SIGNAL, self._power.left())
            return
        self._confirm(confirmation)

    def _confirm(self, confirmation: OperatorRequest) -> None:
        if self._confirmation is None:
            self._confirmation = confirmation

    async def _confirmed(self, confirmation: OperatorRequest) -> OperatorAnswer:
        """A person's "rebooted": with the host off by our hand, only once the BMC shows it On."""
        if self._power.is_off:
            refusal = await self._still_off()
            if refusal is not None:
                raise ApplicationError(refusal, type="HostStillOff", non_retryable=True)
            self._power.seen_on()
        self._confirm(confirmation)
        return OperatorAnswer(accepted=True, message=f"reboot of {self._request.host_id} confirmed")

    async def _still_off(self) -> str | None:
        inventory = self._inventory
        assert inventory is not None  # off by our hand: the BMC path resolved it
        try:
            power: SystemPower = await workflow.execute_activity(
                activity_api.read_power_state,
                ReadPowerStateInput(bmc=inventory.bmc),
                **kernel.options(kernel.BMC_READ, f"is {self._request.host_id} On? (host-rebooted)"),
            )
        except ActivityError as err:
            return self._power.confirmation_refusal(None, cause_in_words(err))
        return self._power.confirmation_refusal(power.power_state)

    @workflow.update(name=RETRY_UPDATE)
    def retry(self, request: OperatorRequest) -> OperatorAnswer:
        """Try the BMC again while a person is awaited (`_retried`)."""
        self._retry = request
        self._retry_taken = Answered(RETRY_UPDATE, request.requested_by, workflow.now())
        what = "powering it on" if self._power.is_off else "power cycling it"
        return OperatorAnswer(accepted=True, message=f"retry accepted from {request.requested_by}: {what}")

    @retry.validator
    def _validate_retry(self, request: OperatorRequest) -> None:
        if (refused := second_answer_refusal(RETRY_UPDATE, self.answer_taken())) is not None:
            raise ValueError(refused)  # an abort accepted first wins
        if not self._waiting_for_person or self._retry is not None:
            raise ValueError(
                f"`retry` is only accepted while a person is awaited (now: {self.phase}: {self.details})"
            )
        if self._inventory is None:
            raise ValueError("the reboot method is manual: reboot the host and `metalflow host-rebooted`")

    @workflow.signal(name=BMC_LEASE_GRANTED_SIGNAL)
    def bmc_lease_granted(self, grant: LeaseGrant) -> None:
        """The BMC's lease granted this run a slot."""
        self._leases.granted(grant)

    @workflow.update(name=MARK_REBOOTED_UPDATE)
    async def mark_rebooted(self, confirmation: OperatorRequest) -> OperatorAnswer:
        """Like `host_rebooted`, with an answer; only while waiting for a person."""
        return await self._confirmed(confirmation)

    @mark_rebooted.validator
    def _validate_mark_rebooted(self, confirmation: OperatorRequest) -> None:
        if not self._waiting_for_person:
            raise ValueError("this reboot is not waiting for a person: the BMC is rebooting the host")

    @workflow.update(name=HOST_REBOOTED_UPDATE)
    async def host_rebooted_update(self, confirmation: OperatorRequest) -> OperatorAnswer:
        """`host_rebooted` with an answer: refused, naming the phase, unless a person is awaited."""
        return await self._confirmed(confirmation)

    @host_rebooted_update.validator
    def _validate_host_rebooted(self, confirmation: OperatorRequest) -> None:
        if not self._waiting_for_person:
            raise ValueError(
                f"{workflow.info().workflow_id} is not waiting for a manual reboot: "
                f"it is {self.phase}: {self.details}"
            )

    def on_abort(self) -> None:
        self._stopping = True

    def answer_taken(self) -> Answered | None:
        """A retry the person's wait has not read yet wins over an abort; else the kernel's."""
        waiting = self._waiting_for_person and self._retry is not None
        return (self._retry_taken if waiting else None) or super().answer_taken()

    def abort_promise(self) -> str:
        if self._leases.queued_for is not None:  # nothing sent yet: its place is given back
            what = withdrawn_words("reboot", self._leases.queued_for)
        elif self._waiting_for_person and self._power.is_off:
            what = f"the wait ends; {self._power.left()}"
        elif self._waiting_for_person:
            what = "the manual reboot wait ends; nothing was rebooted by metalflow"
        else:
            what = "a power cycle in flight is cut short and the host powered back on if we turned it off"
        return f"aborting ({self.phase}: {self.details}): {what}"

    def ending_error(self, err: BaseException) -> BaseException | None:
        """A cancel that could not power the host on again ends failed `HostLeftOff` with the
        final words (a cancel carries none: the entity would record only "aborted")."""
        if isinstance(err, asyncio.CancelledError | CancelledError) and self._power.is_off:
            return HostLeftOff(f"cancelled (the workflow was cancelled). {self.left_behind}")
        return super().ending_error(err)

    def aborted_result(self, err: BaseException) -> HostRebootResult:
        """An abort completes the run (Phase `aborted`): who, why, whether the host was cycled;
        `boot_generation` is the one reached (this one when cycled, else the one before)."""
        request = self._request
        reached = self._cycled or HostRebootResult(
            host_id=request.host_id,
            boot_generation=boot_generation.reached(request.boot_generation, accepted=False),
            method="",
            finished_at=workflow.now(),
        )
        return reached.model_copy(update={"finished_at": workflow.now(), "aborted": self.aborted_words()})

    def aborted(self, outcome: str = "", *details: Any) -> WorkflowError:
        """The abort's words say whether the host was cycled (the result has the generation).
        Cycled, or left OFF, the end's own words say it (`_clean_up`, after these in the final
        details and the entity's record): said once, not twice."""
        if self._cycled or self._power.is_off:
            return super().aborted(outcome, *details)
        # ... and what it did to the host's power (`left`: not touched, or on): an end that says
        # none makes the entity read the power once (i40q), keeping the host busy meanwhile.
        said = outcome or f"the host was not rebooted by metalflow ({self._power.left()})"
        return super().aborted(said, *details)

    # -- the steps -------------------------------------------------------------------------------
    async def _power_cycle(
        self, inventory: HostInventory, asked: tuple[LeaseHolder, RequestLeaseResult]
    ) -> tuple[str, tuple[str, ...]]:
        request = self._request
        how = "ForceOff then On" if request.force_off else "power cycle"
        self.enter(POWERING, f"{how} for generation {request.boot_generation}")
        # The whole cycle is one task that a cancel request never cuts: cut between Off and On, it
        # would leave the host off. A stop (cancel or abort) shortens it instead (`_stop_cycle`).
        cycle = asyncio.ensure_future(self._power_under_lease(inventory, how, asked))
        try:
            await self.wait(cycle.done)
        except asyncio.CancelledError:
            workflow.logger.info("cancelled during the %s: powering the host back on first", how)
            # The reboot happens anyway (the cancel came too late to stop it): report it done, so
            # the operation that cancelled it still tells DPF the host was rebooted. A cycle that
            # fails now goes to the manual reboot wait, as it would uncancelled: the host may be off.
            if await self._leases.withdraw(cycle):
                raise  # queued for the BMC's lease: nothing was sent, not rebooted
            self._cancelled = True  # its On (`cut_short_words`) and its record say so
            return await self._stop_cycle(inventory, cycle)
        except OperationAborted:
            # Aborted: the cycle is brought to its end now; the run then ends aborted, saying
            # whether the host was cycled.
            if cycle.done():
                return await cycle  # it ended as the abort came
            if await self._leases.withdraw(cycle):
                raise  # queued for the BMC's lease: nothing was sent
            return await self._stop_cycle(inventory, cycle)
        return await cycle

    async def _stop_cycle(self, inventory: HostInventory, cycle: Cycle) -> tuple[str, tuple[str, ...]]:
        """Bring a cycle in flight to its end now: the host ends On, having been cycled once."""
        self._stopping = True  # the ForceOff path and a handed-back wait send On on their own
        if self._cycle_activity is None:
            return await cycle
        for _ in range(STOP_POLLS):
            if cycle.done():
                return await cycle
            activity = self._cycle_activity
            if activity is None or activity.done() or self._handed_back:
                # The cycle handed its power-down wait back (Off, durable): it cuts its timer
                # and sends On itself at once; nothing to stop here.
                await self.wait(cycle.done, timeout=STOP_POLL_SECONDS, abortable=False)
                continue
            power: SystemPower = await self.call(
                activity_api.read_power_state,
                ReadPowerStateInput(bmc=inventory.bmc),
                kernel.options(kernel.BMC_READ, f"read the power of {self._request.host_id} to stop"),
                abortable=False,  # this is the stop
            )
            if self._handed_back or cycle.done():
                continue  # it moved on meanwhile: as above
            activity = self._cycle_activity or activity
            if power.power_state == "Off":
                # Off: the cycle is in its Off-to-On wait (or between its steps); the activity may
                # only send On from here, so stopping it and sending On ourselves is one cycle.
                self._stop_sent_on = True
                await kernel.cancel_and_wait(activity)
                cycle.add_done_callback(_retrieve)  # it ends with the cancellation, taken here
                on = await self._set_power(inventory, "On")
                sent = () if on.sent is None else (on.sent,)
                return f"{power.power_cycle_method}{cut_short_words(self._cancelled)}", sent
            await self.wait(cycle.done, timeout=STOP_POLL_SECONDS, abortable=False)
        return await cycle

    async def _power_under_lease(
        self, inventory: HostInventory, how: str, asked: tuple[LeaseHolder, RequestLeaseResult]
    ) -> tuple[str, tuple[str, ...]]:
        """The cycle (or ForceOff/On) inside a slot of the BMC's fleet-wide lease."""
        work = self._force_off_then_on if self._request.force_off else self._cycle_once
        async with self._leases.hold(inventory.bmc, f"{how} of {self._request.host_id}", asked):
            return await work(inventory)

    async def _powered_on_after(self, err: ActivityError | None) -> bool:
        """A cycle that failed after its ForceOff left the host off: On again, after the custody's
        backoff. False: not off by this run's hand, or the attempts are spent (a person next)."""
        step = None if err is None else off_step(err)
        if step is not None:
            generation = self._request.boot_generation
            self._power.turned_off(f"ForceOff of its power cycle to generation {generation}, step {step}")
        inventory = self._inventory
        while self._power.is_off and inventory is not None:
            try:
                await self._set_power(inventory, "On")
            except ActivityError as refused:
                delay = self._power.on_refused(cause_in_words(refused))
                if delay is None:
                    return False
                backoff = f"backoff before powering {self._request.host_id} on again"
                await self.wait(lambda: False, timeout=delay, abortable=False, timeout_summary=backoff)
                continue
            self._power.seen_on()
            return True
        return False

    async def _wait_for_manual_reboot(self, why: str) -> HostRebootResult:
        """Wait for a person: `host-rebooted` (with the host On, when off by us), `retry`, `abort`."""
        host = self._request.host_id
        while True:
            self._waiting_for_person, self._retry = True, None
            if self._power.is_off:
                words = self._power.hand_over_words(then="the reboot completes", confirm=True)
                kernel.report("host-left-off", words)
                self.enter(MANUAL_INTERVENTION_REQUIRED, words)
            else:
                retry = (
                    "" if self._inventory is None else f", or fix the BMC and `metalflow host retry {host}`"
                )
                self.enter(
                    WAITING_FOR_MANUAL_REBOOT,
                    f"{why}; reboot {host} and send the signal `{HOST_REBOOTED_SIGNAL}` "
                    f"(`metalflow host-rebooted {host}`){retry}",
                )
            await self._tell_parent_of_person()  # the host OFF: its caller's Phase says it
            try:
                await self.wait(lambda: self._confirmation is not None or self._retry is not None)
            except OperationAborted:
                if self._confirmation is None:
                    raise
                # A confirmation that came with the abort still counts: the host was rebooted.
            finally:
                self._waiting_for_person = False
            if self._confirmation is not None:
                break
            result = await self._retried()
            if result is not None:
                return result
            why = self._why or why
        confirmation = self._confirmation
        assert confirmation is not None
        await self.finish(REBOOTED, f"confirmed by {confirmation.requested_by}")
        return HostRebootResult(
            host_id=self._request.host_id,
            boot_generation=self._request.boot_generation,
            method="manual",
            confirmed_by=confirmation.requested_by,
            finished_at=workflow.now(),
        )

    async def _retried(self) -> HostRebootResult | None:
        """A person's `retry`: On for a host off by this run's hand, else the cycle again (its
        lease asked afresh); the reboot's result, or None (the BMC failed again: wait again)."""
        inventory = self._inventory
        assert inventory is not None  # `retry` is refused on the manual method
        if self._power.is_off:
            self._power.retried()
            self.enter(POWERING, f"On of {self._request.host_id} (retry)")
            if await self._powered_on_after(None):
                return await self._rebooted("ForceOff+On (On sent again on retry)", ())
            return None
        self.enter(POWERING, f"power cycle of {self._request.host_id} again (retry)")
        inventory, asked = await self._leases.ask_for_host(
            self._request.host_id,
            self._request.boot_generation,
            f"ask the lease of {self._request.host_id} again",
        )
        self._inventory = inventory
        try:
            method, resets = await self._power_cycle(inventory, asked)
        except ActivityError as err:
            if await self._powered_on_after(err):
                return await self._rebooted("ForceOff+On (On sent again after the cycle failed)", ())
            self._why = bmc_failure_reason(self._request.host_id, err)
            return None
        return await self._rebooted(method, resets)


def _retrieve(task: asyncio.Future[Any]) -> None:
    # The cycle task of a stopped activity ends with its cancellation: take it, so it is not logged.
    if not task.cancelled():
        task.exception()
