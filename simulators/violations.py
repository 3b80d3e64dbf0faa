"""The recorder of protocol violations committed by the simulated site's clients.

Each check lives where the knowledge is (the DPF controller, the BMCs, the Grove controller);
this module only keeps what they found, for `/sim/violations` and `metalflow sim violations`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

log = logging.getLogger(__name__)

# The kinds of violation, one name per check.
REBOOT_ANNOTATION_REMOVED_WITHOUT_POWER_CYCLE = "reboot-annotation-removed-without-power-cycle"
POWER_CYCLE_DURING_INSTALL = "power-cycle-during-install"
# DPF v26 (simulators/dpf/BEHAVIOUR.md): the annotation removed before DPF stamped every rebooting
# DPU `Pending`/WaitingForManualPowerCycleOrReboot (DPF sets it again: the reboot does not count);
# a host reset while a DPU's Arm OS is shutting down (`rebootStatus` WaitForShutdown); a reboot
# that does not meet the method DPF asked for (a warm reset where PowerCycle was required).
REBOOT_ANNOTATION_REMOVED_EARLY = "reboot-annotation-removed-early"
HOST_RESET_DURING_ARM_SHUTDOWN = "host-reset-during-arm-shutdown"
REBOOT_METHOD_NOT_MET = "reboot-method-not-met"
BMC_SESSION_EXPIRED = "bmc-session-expired"
# Grove (simulators/grove/checks.py says exactly when each is recorded).
PODGANG_MIXED_TEMPLATE_HASHES = "podgang-mixed-template-hashes"
PODCLIQUE_BELOW_MIN_AVAILABLE = "podclique-below-min-available"
POD_WITHOUT_PODGANG = "pod-without-podgang"
GANG_TERMINATION_TRIGGERED = "gang-termination-triggered"
GREP_393_ORDER = "grep-393-order"


@dataclass(frozen=True)
class Violation:
    time: str
    kind: str
    subject: str
    detail: str


class Violations:
    """Keeps every violation recorded since the simulator started, oldest first."""

    def __init__(self) -> None:
        self._items: list[Violation] = []

    def record(self, kind: str, subject: str, detail: str) -> Violation:
        violation = Violation(
            time=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            kind=kind,
            subject=subject,
            detail=detail,
        )
        self._items.append(violation)
        log.warning("violation %s on %s: %s", kind, subject, detail)
        return violation

    def as_json(self) -> list[dict[str, str]]:
        return [asdict(v) for v in self._items]

    def __len__(self) -> int:
        return len(self._items)
