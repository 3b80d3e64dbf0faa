"""In-process publish/subscribe for facts that cross pieces of the simulated site.

A host's power transitions are the main such fact: the DPF controller needs them to judge the
external-reboot handshake, the DPU BMCs to activate staged firmware, and the invariant checks to
tell whether a host was power-cycled while a DPU was installing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class PowerTransition:
    """One change of a host's power state, as its BMC logs it."""

    host_id: str
    time: datetime
    from_state: str
    to_state: str
    reset_type: str | None


@dataclass(frozen=True)
class PowerCycled:
    """A host came back `On` after having been `Off` (a whole power cycle, however it was done)."""

    host_id: str
    time: datetime


@dataclass(frozen=True)
class DPUReset:
    """A DPU's BMC reset the DPU (its Arm, or Arm and NIC), whoever asked: its agent restarts."""

    host_id: str
    dpu_id: str
    time: datetime
    reset_type: str  # ForceRestart (Arm only), PowerCycle, SOC.ForceReset (Arm and NIC)


@dataclass(frozen=True)
class ArmShutdown:
    """A DPU's agent shut its Arm OS down for a SystemLevelReset (`shutdown -h now`, DPF agent
    `reboot.go` `execSystemLevelReset`): its BMC shows the Arm in low-power standby (`Paused`)."""

    host_id: str
    dpu_id: str
    time: datetime


Event = PowerTransition | PowerCycled | DPUReset | ArmShutdown
Handler = Callable[[Event], None]


class Hub:
    """Synchronous publish/subscribe: handlers run inside `publish`, in subscription order.

    Handlers must not block; one that needs to wait schedules its own task.
    """

    def __init__(self) -> None:
        self._handlers: dict[type, list[Handler]] = defaultdict(list)

    def subscribe(self, event_type: type, handler: Handler) -> None:
        self._handlers[event_type].append(handler)

    def publish(self, event: Event) -> None:
        for handler in list(self._handlers[type(event)]):
            handler(event)
