"""Host power as Temporal activities over the Redfish driver (`drivers/redfish/power.py`).

Activity names (what workflows call): `read_power_state`, `set_power_state`, `power_cycle_host`,
`shut_down_host_gracefully`. Each opens one connection to the BMC for its duration (sessions are
shared with concurrent activities on the same BMC and deleted at the end), heartbeats on every
poll of a wait, and raises only the errors of `contracts.errors`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import HeartbeatGate, heartbeating, wait_until_recorded
from activities.redfish.access import BMCSource, current_access
from contracts.models.inventory import BMCAccess
from contracts.models.redfish import (
    POWER_CYCLE_STEP,
    STEPS_HOST_MAY_BE_OFF,
    GracefulShutdownInput,
    GracefulShutdownResult,
    PowerCycleInput,
    PowerCycleProgress,
    PowerCycleResult,
    ReadPowerStateInput,
    SetPowerInput,
    SetPowerResult,
    SystemPower,
)
from drivers.redfish.client import RedfishClient
from drivers.redfish.power import graceful_shutdown, read_power, set_power
from drivers.redfish.powercycle import PowerCycle

# The SDK's heartbeat throttle when an activity has no heartbeat timeout, and its cap.
_DEFAULT_THROTTLE = timedelta(seconds=30)
_MAX_THROTTLE = timedelta(seconds=60)
_FLUSH_MARGIN_SECONDS = 1.0


def heartbeat_flush_seconds(heartbeat_timeout: timedelta | None) -> float:
    """How long until a heartbeat recorded now has surely been sent under the SDK's default
    throttle: the power cycle's wait when it has no server to read its step back from (unit
    tests); with one, it reads the step back instead of waiting (`PowerCycle._flush`)."""
    throttle = _DEFAULT_THROTTLE if heartbeat_timeout is None else min(heartbeat_timeout * 0.8, _MAX_THROTTLE)
    return throttle.total_seconds() + _FLUSH_MARGIN_SECONDS


def _read_back(
    what: str, beat: Callable[..., None]
) -> Callable[[PowerCycleProgress, float], Awaitable[None]] | None:
    """How the power cycle confirms a recorded step: read back from Temporal by a worker's
    activity; None only without a Temporal client (the SDK's `ActivityEnvironment` in unit
    tests), where the cycle trusts its flush wait."""
    try:
        activity.client()
    except RuntimeError:
        return None
    return lambda progress, within: wait_until_recorded(progress, within_seconds=within, what=what, beat=beat)


def with_step(err: ApplicationError, step: str) -> ApplicationError:
    """`err` (same type, message, retry flags) with the power cycle's step in its details."""
    return ApplicationError(
        err.message,
        *err.details,
        {POWER_CYCLE_STEP: step},
        type=err.type,
        non_retryable=err.non_retryable,
        next_retry_delay=err.next_retry_delay,
        category=err.category,
    )


def sent_step(reset_type: str) -> str:
    """The step a sent reset leaves (`POWER_CYCLE_STEP`): an off asked, or an on (or a restart)."""
    return "off_requested" if reset_type in ("ForceOff", "GracefulShutdown") else "on_requested"


def earlier_step(details: Any) -> str | None:
    """The step an earlier attempt of `set_power_state` heartbeated once it sent a reset, else None."""
    first = details[0] if details else None
    step = first.get(POWER_CYCLE_STEP) if isinstance(first, dict) else None
    return step if step in STEPS_HOST_MAY_BE_OFF else None


def resumed_progress(details: Any) -> PowerCycleProgress | None:
    """The progress a previous attempt heartbeated, or None on a first attempt."""
    if not details:
        return None
    return PowerCycleProgress.model_validate(details[0])


class PowerActivities:
    """Host power activities; the worker builds one, holding the worker's `RedfishClient`.

    With an `inventory`, each attempt uses the BMC's endpoint, credential reference, TLS, auth
    and system as the inventory says at that moment (the workflow's copy identifies the BMC), so
    an operator's fix to the site file helps an operation that is already retrying.
    """

    def __init__(self, client: RedfishClient, inventory: BMCSource | None = None) -> None:
        self._client = client
        self._inventory = inventory

    async def _current(self, given: BMCAccess) -> BMCAccess:
        return await current_access(self._inventory, given)

    @activity.defn(name="read_power_state")
    async def read_power_state(self, request: ReadPowerStateInput) -> SystemPower:
        """Read the host's PowerState, the reset types its BMC allows and how it would power cycle."""
        bmc = await self._current(request.bmc)
        async with heartbeating(), self._client.connect(bmc, on_wait=HeartbeatGate()) as connection:
            return await read_power(connection)

    @activity.defn(name="set_power_state")
    async def set_power_state(self, request: SetPowerInput) -> SetPowerResult:
        """Send one reset the BMC advertises (skipped when its target holds) and wait for the state.

        Once a reset is sent, this attempt's heartbeats carry the step (`sent_step`), so a later
        attempt knows it too; a failure after it (this attempt's or an earlier one's) says it in
        its error's `POWER_CYCLE_STEP` detail, and one without it sent nothing, in any attempt
        (a caller claims the host turned off only then: `off_may_have_been_sent`)."""
        step = earlier_step(activity.info().heartbeat_details)

        def sending(reset_type: str) -> None:
            nonlocal step
            step = sent_step(reset_type)
            activity.heartbeat({POWER_CYCLE_STEP: step})

        def details() -> tuple[Any, ...]:
            return () if step is None else ({POWER_CYCLE_STEP: step},)

        bmc = await self._current(request.bmc)
        gate = HeartbeatGate(send=lambda *_: activity.heartbeat(*details()))
        try:
            async with heartbeating(details), self._client.connect(bmc, on_wait=gate) as connection:
                return await set_power(connection, request, activity.logger.info, sending)
        except ApplicationError as err:
            if step is None:
                raise
            raise with_step(err, step) from err

    @activity.defn(name="shut_down_host_gracefully")
    async def shut_down_host_gracefully(self, request: GracefulShutdownInput) -> GracefulShutdownResult:
        """GracefulShutdown with a ForceOff fallback after the grace period."""
        bmc = await self._current(request.bmc)
        async with heartbeating(), self._client.connect(bmc, on_wait=HeartbeatGate()) as connection:
            return await graceful_shutdown(connection, request, activity.logger.info)

    @activity.defn(name="power_cycle_host")
    async def power_cycle_host(self, request: PowerCycleInput) -> PowerCycleResult:
        """Power cycle the host exactly once for this boot generation, resuming a previous attempt."""
        info = activity.info()
        # This activity's own last attempt, else where an earlier activity of the cycle left it.
        resume = resumed_progress(info.heartbeat_details) or request.resume
        activity.logger.info(
            "power cycle of %s for boot generation %d (attempt %d, resuming from %s)",
            request.bmc.bmc_id, request.boot_generation, info.attempt, resume.step if resume else "the start",
        )  # fmt: skip
        bmc = await self._current(request.bmc)
        # Every poll beats the progress: forwarded to the SDK only when it changed (a step) or
        # once per beat interval, so a step is sent at once under the worker's short throttle.
        beat = HeartbeatGate()
        stop = info.start_to_close_timeout  # the attempt ends then, if not before by the cycle's own deadline
        ends_by = info.started_time + stop if stop else None
        async with self._client.connect(bmc) as connection:
            cycle = PowerCycle(
                connection,
                request,
                resume,
                persist=beat,
                flush_seconds=heartbeat_flush_seconds(info.heartbeat_timeout),
                confirm=_read_back(f"power cycle of {request.bmc.bmc_id}", beat),
                attempt=info.attempt,
                attempt_ends_by=ends_by,
            )
            # A BMC that does not answer is said in the progress (`host status` reads it) while
            # the attempt rides it out, and unsaid once it answers: a beat per change at most.
            connection.on_problem = cycle.bmc_problem
            connection.on_answer = cycle.bmc_answered
            # A single request (a reset the BMC is slow to answer) may outlast the heartbeat
            # timeout: beat from the background with the latest progress meanwhile (the first
            # beat one interval in, so the first step recorded goes out unthrottled: `heartbeating`).
            async with heartbeating(lambda: (cycle.progress,)):
                try:
                    return await cycle.run()
                except ApplicationError as err:
                    raise with_step(err, cycle.progress.step) from err
