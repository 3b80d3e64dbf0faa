"""The firmware run's activity options and bounds (`FirmwareWorkflow`, workflow.py): how many
stages run at once per host, how long one may take, how the host's power wait is bounded, which
DPF phases an install is in, and the run's worst-case history (`worst_case_events`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from temporalio import workflow
from temporalio.common import RetryPolicy

from workflows.kernel import BMC_READ, NON_RETRYABLE


def worst_case_events(*, dpus: int, dpf_changes: int) -> int:
    """The most history events a run may cost (see the module docstring), given what it did."""
    return 80 + 9 * dpus + 4 * dpf_changes


MAX_PARALLEL_STAGES: Final = 4  # SimpleUpdates in flight per host: a bounded load on its DPU BMCs
STAGE_TIMEOUT_SECONDS: Final = 1800.0  # one BMC update task, as the BMC reports it
STAGE_OPTIONS: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(seconds=STAGE_TIMEOUT_SECONDS + 120),
    "heartbeat_timeout": timedelta(seconds=60),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=2),
        maximum_interval=timedelta(seconds=60),
        maximum_attempts=5,
        non_retryable_error_types=NON_RETRYABLE,
    ),
}


def power_wait_options(seconds: float) -> workflow.ActivityConfig:
    """`wait_for_power_state`: an attempt lasts up to the wait, heartbeating each poll; retries
    keep the input's deadline, and all attempts end within a margin of it."""
    return {
        **BMC_READ,
        "start_to_close_timeout": timedelta(seconds=seconds + 60),
        "schedule_to_close_timeout": timedelta(seconds=seconds + 300),
        "heartbeat_timeout": timedelta(seconds=60),
    }


INSTALL_PHASES: Final = frozenset({"Config FW Parameters", "Prepare BFB", "OS Installing"})
