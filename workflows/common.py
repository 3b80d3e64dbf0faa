"""Transitional: the kernel's names under their old module, while workflows move to `workflows.kernel`."""

from workflows.kernel import (  # noqa: F401
    BMC_READ,
    INVENTORY,
    KUBE_READ,
    KUBE_WRITE,
    NON_RETRYABLE,
    POWER_CYCLE_ATTEMPTS,
    POWER_CYCLE_HEARTBEAT,
    QUICK_RETRY,
    WATCHER,
    WATCHER_HEARTBEAT_SECONDS,
    bounded,
    describe_failure,
    ending,
    enter_phase,
    options,
    power_cycle_options,
    set_details,
)
from workflows.kernel import cancel_and_wait as cancelled_call_ended  # noqa: F401

ABORTED_TYPE = "OperationAborted"

__all__ = [
    "BMC_READ",
    "INVENTORY",
    "KUBE_READ",
    "KUBE_WRITE",
    "NON_RETRYABLE",
    "POWER_CYCLE_ATTEMPTS",
    "POWER_CYCLE_HEARTBEAT",
    "QUICK_RETRY",
    "WATCHER",
    "WATCHER_HEARTBEAT_SECONDS",
    "bounded",
    "describe_failure",
    "ending",
    "enter_phase",
    "options",
    "power_cycle_options",
    "set_details",
    "cancelled_call_ended",
    "ABORTED_TYPE",
]
