"""The host power state machine: resets, asynchronous transitions, the power log and Hub events.

A reset answers before `PowerState` changes. Each leg of a transition (On -> Off, Off -> On)
shows its intermediate state (`PoweringOff`, `PoweringOn`) for `power_transition_seconds`,
driven by one `loop.call_later` timer per host in transition (none for an idle host).

Decisions (real BMCs differ; these are the ones the simulator makes, for every profile):
- `On`/`ForceOn` of a host already On, and `ForceOff`/`GracefulShutdown` of a host already Off,
  are accepted and change nothing.
- `ForceRestart`/`GracefulRestart`/`Nmi` of a host that is Off are refused with 400
  `ActionParameterValueConflict` (the bare-metal manager turns a restart of an Off host into
  `On`); `PowerCycle` of an Off host powers it on.
- `PushPowerButton` toggles the power.
- Any reset while a transition runs is refused with 409 `ResourceInUse`.
- The `reset-cooldown` profile refuses every reset with 409 for `reset_cooldown_seconds` after
  the host last reached Off (including the Off inside a power cycle).
- The `power-lag` profile shows no `Powering*` state: `PowerState` keeps its old value for a
  lag drawn (deterministically per host and transition) between `power_lag_min_seconds` and
  `power_lag_max_seconds`, then shows the new one; a reset meanwhile is refused with 409.
- A reset type the profile lists in `not_implemented` is advertised but answers 501.

The power log keeps settled transitions only (On -> Off, Off -> On), each with the reset type
that caused it; every one is published as `PowerTransition`, and every Off -> On also as
`PowerCycled` (hosts start On, so reaching On always follows an Off).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from datetime import UTC, datetime

from aiohttp import web

from simulators.events import Hub, PowerCycled, PowerTransition
from simulators.timings import Timings

from . import messages
from .host import HostBMC
from .tasks import Task, Tasks

_INTERMEDIATE = {"Off": "PoweringOff", "On": "PoweringOn"}


class PowerControl:
    """Carries out resets on host BMCs."""

    def __init__(self, hub: Hub, timings: Timings, tasks: Tasks) -> None:
        self._hub = hub
        self._timings = timings
        self._tasks = tasks
        # (host, reset type, when) for each reset that starts a transition: reaction times.
        self.on_reset: Callable[[str, str, datetime], None] | None = None
        self.on_change: Callable[[HostBMC], None] | None = None  # told each PowerState change

    def reset(self, host: HostBMC, reset_type: object, prefix: str) -> web.Response:
        """Start the transition a `ComputerSystem.Reset` asks for, or refuse it; never waits."""
        action = "ComputerSystem.Reset"
        if reset_type is None:
            return messages.action_parameter_missing(action, "ResetType")
        if not isinstance(reset_type, str) or reset_type not in host.profile.reset_types:
            shown = reset_type if isinstance(reset_type, str) else repr(reset_type)
            return messages.error_response(
                400,
                "ActionParameterNotSupported",
                f"The parameter ResetType for the action {action} is not supported on the target "
                f"resource: {shown!r} is not one of {', '.join(host.profile.reset_types)}.",
                args=["ResetType", action],
                resolution="Remove the parameter supplied and resubmit the request if the operation failed.",
            )
        if reset_type in host.profile.not_implemented:
            return messages.error_response(
                501,
                "ActionNotSupported",
                f"The action {action} with ResetType {reset_type} is not supported by the resource.",
                args=[f"{action} ({reset_type})"],
                resolution="The action supplied cannot be resubmitted to the implementation.  Perhaps "
                "the action was invalid, the wrong resource was the target or the implementation "
                "documentation may be of assistance.",
            )
        if host.pending:
            return messages.resource_in_use(
                f"The system is in transition ({host.power}); the reset {reset_type} cannot be performed "
                "until the power transition completes."
            )
        refusal = self._cooldown_refusal(host)
        if refusal is not None:
            return refusal
        plan = self._plan(host.power, reset_type)
        if plan is None:
            return messages.error_response(
                400,
                "ActionParameterValueConflict",
                f"The parameter ResetType with the requested value of {reset_type} does not meet the "
                f"constraints of the implementation: the system is powered {host.power}.",
                args=["ResetType", reset_type],
                resolution="Power the system on with ResetType On, then retry the request.",
            )
        task = None
        if host.profile.reset_answer == "202":
            task = self._tasks.new(
                host.service_id,
                prefix,
                f"Reset {reset_type}",
                self._timings.power_transition_seconds * len(plan),
            )
        if plan:
            self._start(host, plan, reset_type, task)
        elif task is not None:
            task.complete(f"The reset {reset_type} completed; the system was already {host.power}.")
        return self._accepted(host, task)

    def _cooldown_refusal(self, host: HostBMC) -> web.Response | None:
        if not host.profile.cooldown_after_off or host.off_at is None:
            return None
        remaining = host.off_at + self._timings.reset_cooldown_seconds - asyncio.get_running_loop().time()
        if remaining <= 0:
            return None
        seconds = max(1, math.ceil(remaining))
        return messages.resource_in_use(
            "The system was powered off recently and cannot accept a power action yet. "
            f"Wait {seconds} seconds and retry the request.",
            headers={"Retry-After": str(seconds)},
        )

    @staticmethod
    def _plan(power: str, reset_type: str) -> tuple[str, ...] | None:
        """The settled states to go through, () for nothing to do, None when refused."""
        on = power == "On"
        if reset_type in ("On", "ForceOn"):
            return () if on else ("On",)
        if reset_type in ("ForceOff", "GracefulShutdown"):
            return ("Off",) if on else ()
        if reset_type == "PushPowerButton":
            return ("Off",) if on else ("On",)
        if reset_type in ("ForceRestart", "GracefulRestart"):
            return ("Off", "On") if on else None
        if reset_type == "PowerCycle":
            return ("Off", "On") if on else ("On",)
        if reset_type == "Nmi":
            return () if on else None
        return None

    def _accepted(self, host: HostBMC, task: Task | None) -> web.Response:
        answer = host.profile.reset_answer
        if answer == "202" and task is not None:
            retry = max(1, math.ceil(self._timings.power_transition_seconds))
            return messages.json_response(
                task.body(), status=202, headers={"Location": task.uri, "Retry-After": str(retry)}
            )
        if answer == "200":
            return messages.json_response(
                {
                    "@Message.ExtendedInfo": [
                        messages.message("Success", "The request completed successfully.")
                    ]
                }
            )
        return web.Response(status=204, headers={"OData-Version": "4.0"})

    def _start(self, host: HostBMC, plan: tuple[str, ...], reset_type: str, task: Task | None) -> None:
        if self.on_reset is not None:
            self.on_reset(host.host_id, reset_type, datetime.now(UTC))
        host.pending = plan
        host.reset_type = reset_type
        host.task = task
        if not host.profile.power_lag:
            host.power = _INTERMEDIATE[plan[0]]
        if self.on_change is not None:
            self.on_change(host)
        loop = asyncio.get_running_loop()
        host.timer = loop.call_later(self._leg_seconds(host), self._step, host)

    def resume(self, host: HostBMC) -> None:
        """Go on with a transition a restart kept (`keep.py`): `host.pending` set, no timer yet.
        Not a new reset (no `on_reset`); its next leg takes a whole leg's time."""
        if not host.profile.power_lag:
            host.power = _INTERMEDIATE[host.pending[0]]
        if self.on_change is not None:
            self.on_change(host)
        host.timer = asyncio.get_running_loop().call_later(self._leg_seconds(host), self._step, host)

    def _leg_seconds(self, host: HostBMC) -> float:
        """How long the next leg of a transition takes (a lagging BMC: how long it shows the old state)."""
        if not host.profile.power_lag:
            return self._timings.power_transition_seconds
        legs = 0 if host.log is None else len(host.log)
        low, high = self._timings.power_lag_min_seconds, self._timings.power_lag_max_seconds
        return random.Random(f"{host.host_id}/{legs}").uniform(low, max(low, high))

    def _step(self, host: HostBMC) -> None:
        target, rest = host.pending[0], host.pending[1:]
        from_state = "On" if target == "Off" else "Off"
        now = datetime.now(UTC)
        stamp = now.isoformat().replace("+00:00", "Z")
        host.power = target
        if host.log is None:
            host.log = []
        host.log.append({"time": stamp, "from": from_state, "to": target, "reset_type": host.reset_type})
        loop = asyncio.get_running_loop()
        if target == "Off":
            host.off_at = loop.time()
        else:
            host.last_reset_time = now.isoformat(timespec="seconds").replace("+00:00", "Z")
        host.pending = rest
        reset_type = host.reset_type
        if rest:
            if not host.profile.power_lag:
                host.power = _INTERMEDIATE[rest[0]]
            host.timer = loop.call_later(self._leg_seconds(host), self._step, host)
        else:
            host.timer = None
            host.reset_type = None
            if host.task is not None:
                host.task.complete(f"The reset {reset_type} completed; the system is {target}.")
                host.task = None
        if self.on_change is not None:
            self.on_change(host)
        # Publish last: handlers see the host already in its new state.
        self._hub.publish(PowerTransition(host.host_id, now, from_state, target, reset_type))
        if target == "On":
            self._hub.publish(PowerCycled(host.host_id, now))

    def cancel(self, host: HostBMC) -> None:
        """Stop a running transition's timer (the simulator is stopping)."""
        if host.timer is not None:
            host.timer.cancel()
            host.timer = None
