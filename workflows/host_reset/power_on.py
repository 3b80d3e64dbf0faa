"""Powering on a host the reset turned off, as a mixin of `HostResetWorkflow` (its runbook,
workflows/host_reset/workflow.py; split out for the 550-line house rule).

The custody rule is `PowerCustody` (workflows/parts/host_power.py): an On refused is tried again
after its backoff, then the host is handed to a person (manual-intervention-required says the
host is OFF, `retry` or `abort`); a cancel asks nobody and tries afresh, once. The generation
rule is `boot_generation.reached` (workflows/parts/boot_generation.py): the host On again after
this run's accepted ForceOff is one power cycle, counted once and told (`power-cycled`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from contracts import metrics
    from contracts.errors import cause_in_words
    from contracts.models.host import MANUAL_INTERVENTION_REQUIRED, HostResetInput
    from contracts.models.redfish import SetPowerResult
    from workflows import kernel
    from workflows.parts import boot_generation
    from workflows.parts.host_power import PowerCustody

POWER_CYCLED = "power-cycled"  # reported (no phase) once the host is On after the BMC took our ForceOff


class HostPowerOn(kernel.Abortable):
    """The reset's power-on steps; the runbook sets these attributes and sends the On."""

    _request: HostResetInput
    _power: PowerCustody
    _off_taken: bool  # the BMC took this run's host ForceOff: On again is one power cycle
    _reached: int
    _generation: int

    # The runbook's own method: one power action on the host's BMC, in its lease slot.
    _set_host_power: Callable[..., Awaitable[SetPowerResult]]

    async def _power_on(
        self, *, then: str, cancel: asyncio.CancelledError | None = None
    ) -> asyncio.CancelledError | None:
        """A host this run turned off is powered on (not abortable), still in its lease slot: an
        On refused is tried again after the custody's backoff (`workflows/parts/host_power.py`),
        then the host is handed to a person: manual-intervention-required says the host is OFF
        and waits for `retry` (On again, then `then`) or `abort` (the run ends saying the host is
        OFF). A cancel (`cancel`: it came before; or it comes during a backoff, an attempt or the
        person's wait) asks nobody: the attempts start afresh, once, and the run's final status
        says the host is OFF if they are refused. Returns the cancel, for the caller to raise."""
        if cancel is not None and not self._power.cancelled():
            return cancel
        while self._power.is_off:
            try:
                if not await self._try_on(then, person=cancel is None):
                    break
            except asyncio.CancelledError as err:
                cancel = err
                if not self._power.cancelled():
                    break
        return cancel

    async def _try_on(self, then: str, *, person: bool) -> bool:
        """One On; refused, the backoff before the next, or (attempts spent) a person's `retry`
        (`person`); False: the attempts are spent and nobody is asked."""
        try:
            on = await self._set_host_power("On", abortable=False)
        except ActivityError as on_err:
            delay = self._power.on_refused(cause_in_words(on_err))
            if delay is not None:
                backoff = f"backoff before powering {self._request.host_id} on again"
                await self.wait(lambda: False, timeout=delay, abortable=False, timeout_summary=backoff)
                return True
            if not person:
                return False
            words = self._power.hand_over_words(then=then)
            kernel.report("host-left-off", words)
            await self.await_decision(MANUAL_INTERVENTION_REQUIRED, words, ("retry",), "")
            self._power.retried()
            return True
        self._power.seen_on()
        self._power_cycled(on)
        return True

    def _power_cycled(self, on: SetPowerResult) -> None:
        """The host is On again after this run's ForceOff (the BMC took it, or this On found the
        host Off and turned it on): one power cycle, the host's next generation, counted once
        (`boot_generation.reached`) and told (`power-cycled`: `PowerCycleIssued`), however the
        reset then ends."""
        accepted = self._off_taken or on.sent is not None
        if not accepted or self._reached > self._request.boot_generation:
            return
        self._generation = self._reached = boot_generation.reached(
            self._request.boot_generation + 1, accepted
        )
        kernel.report(
            POWER_CYCLED,
            f"power cycle (ForceOff+On around the DPU resets) for generation {self._reached}",
            warning=False,
        )
        metrics.workflow_power_cycle("ForceOff+On", on.bmc_id, self._reached)  # the Event's sample
