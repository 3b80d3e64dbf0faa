"""What every host workflow shares: activity option presets and the visibility helpers.

Presets are keyword dictionaries for `workflow.execute_activity(...)` /
`workflow.start_activity(...)`, so a call reads `**KUBE_WRITE` and the timeouts of one kind of
I/O are decided once:

- `INVENTORY`: resolve a host (reads a file or the cluster; quick).
- `KUBE_READ`, `KUBE_WRITE`: one DPF API call (reads, idempotent edits, deletes pinned by uid).
- `BMC_READ`: one Redfish read or a single reset that waits for its power state.
- `POWER_CYCLE`: `power_cycle_host`; heartbeats, resumes from its details, waits `power_down_wait`
  between Off and On, so its start-to-close covers two power transitions plus that wait. Its
  retries stop after `POWER_CYCLE_ATTEMPTS` so a dead BMC turns into a manual reboot rather
  than a workflow that spins forever.
- `WATCHER`: `watch_host_dpf`, long-running; retried without limit (the workflow cancels it).

Every retry policy refuses to retry the permanent error types of `activities.errors`.

Visibility: `enter_phase` sets the `Phase` search attribute and the current details together,
so the UI list and a workflow's page never disagree.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.errors import PERMANENT_TYPES
    from metalflow import metrics, names

NON_RETRYABLE: Final[list[str]] = sorted(PERMANENT_TYPES)

QUICK_RETRY: Final = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=NON_RETRYABLE,
)
"""Unlimited attempts with a capped backoff: for idempotent calls on a world that comes back."""

POWER_CYCLE_ATTEMPTS: Final = 5

INVENTORY: Final[dict[str, Any]] = {
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=10,
        non_retryable_error_types=NON_RETRYABLE,
    ),
}

KUBE_READ: Final[dict[str, Any]] = {
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": QUICK_RETRY,
}

KUBE_WRITE: Final[dict[str, Any]] = {
    "start_to_close_timeout": timedelta(seconds=60),
    "retry_policy": QUICK_RETRY,
}

BMC_READ: Final[dict[str, Any]] = {
    "start_to_close_timeout": timedelta(minutes=6),  # a reset waits up to 5 minutes for its state
    "heartbeat_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=POWER_CYCLE_ATTEMPTS,
        non_retryable_error_types=NON_RETRYABLE,
    ),
}

POWER_CYCLE_HEARTBEAT: Final = timedelta(seconds=4)
"""Short on purpose: the activity waits 0.8 x this before each reset that must not repeat (its
heartbeat must be durable), and a killed worker's cycle resumes this soon on another worker."""


def power_cycle_options(power_down_wait_seconds: float) -> dict[str, Any]:
    """Options for `power_cycle_host`: start-to-close covers Off, the wait, and On."""
    return {
        "start_to_close_timeout": timedelta(minutes=12) + timedelta(seconds=power_down_wait_seconds),
        "heartbeat_timeout": POWER_CYCLE_HEARTBEAT,
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=20),
            maximum_attempts=POWER_CYCLE_ATTEMPTS,
            non_retryable_error_types=NON_RETRYABLE,
        ),
    }


WATCHER_HEARTBEAT_SECONDS: Final = 1.0
"""How often the watcher heartbeats while nothing changes (its `WatchHostInput.heartbeat_seconds`)."""

WATCHER: Final[dict[str, Any]] = {
    "start_to_close_timeout": timedelta(days=30),
    "heartbeat_timeout": timedelta(seconds=5),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(milliseconds=200),
        maximum_interval=timedelta(seconds=10),
        non_retryable_error_types=NON_RETRYABLE,
    ),
}


def enter_phase(phase: str, details: str) -> None:
    """Show a new phase: the `Phase` search attribute and the workflow's current details."""
    workflow.upsert_search_attributes([names.PHASE.value_set(phase)])
    workflow.set_current_details(f"**{phase}**: {details}")
    metrics.workflow_phase_entered(phase)


def set_details(phase: str, details: str) -> None:
    """Update the current details within a phase (no search attribute write)."""
    workflow.set_current_details(f"**{phase}**: {details}")
