"""What every host workflow shares: activity option presets and the visibility helpers.

Presets are `workflow.ActivityConfig`s (typed keyword dictionaries, so mypy checks their keys
and values) for `workflow.execute_activity(activity_api.<name>, ...)`, so a call reads
`**KUBE_WRITE` and the timeouts of one kind of I/O are decided once:

- `INVENTORY`: resolve a host (reads a file or the cluster; quick).
- `KUBE_READ`, `KUBE_WRITE`: one DPF API call (reads, idempotent edits, deletes pinned by uid).
- `BMC_READ`: one Redfish read or a single reset that waits for its power state.
- `POWER_CYCLE`: `power_cycle_host`; heartbeats, resumes from its details, waits `power_down_wait`
  between Off and On, so its start-to-close covers two power transitions plus that wait. Its
  retries stop after `POWER_CYCLE_ATTEMPTS` so a dead BMC turns into a manual reboot rather
  than a workflow that spins forever.
- `WATCHER`: `watch_host_dpf`, long-running; retried without limit (the workflow cancels it).

Every retry policy refuses to retry the permanent error types of `contracts.errors`.

Visibility: `enter_phase` sets the `Phase` search attribute and the current details together,
so the UI list and a workflow's page never disagree.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any, Final

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
)

with workflow.unsafe.imports_passed_through():
    from contracts import metrics, names
    from contracts.errors import PERMANENT_TYPES

NON_RETRYABLE: Final[list[str]] = sorted(PERMANENT_TYPES)

SHORT_IDS_PATCH: Final = "short-child-ids"
"""Children started with ids that do not repeat the word (`reprovision/host-001`, not
`reprovision/host-host-001`). A run that began before keeps the old ids to its end (the SDK
memoises a patch per run), so it finds the children it started and recorded histories replay."""


def short_ids() -> bool:
    """Whether this run names its children in the short form (`contracts.names`, legacy=False)."""
    return workflow.patched(SHORT_IDS_PATCH)


QUICK_RETRY: Final = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=NON_RETRYABLE,
)
"""Unlimited attempts with a capped backoff: for idempotent calls on a world that comes back."""

POWER_CYCLE_ATTEMPTS: Final = 5

INVENTORY: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=10,
        non_retryable_error_types=NON_RETRYABLE,
    ),
}

KUBE_READ: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": QUICK_RETRY,
}

KUBE_WRITE: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(seconds=60),
    "retry_policy": QUICK_RETRY,
}

BMC_READ: Final[workflow.ActivityConfig] = {
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
"""Short on purpose: a killed worker's cycle resumes this soon on another worker. (Before each
reset that must not repeat the activity waits until Temporal shows its step, which the metalflow
worker's heartbeat throttle, `activities.heartbeat.HEARTBEAT_THROTTLE`, makes quick; under the
SDK's default throttle that was 0.8 x this.)"""


def power_cycle_options(power_down_wait_seconds: float) -> workflow.ActivityConfig:
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

WATCHER: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(days=30),
    "heartbeat_timeout": timedelta(seconds=5),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(milliseconds=200),
        maximum_interval=timedelta(seconds=10),
        non_retryable_error_types=NON_RETRYABLE,
    ),
}


def options(
    preset: workflow.ActivityConfig,
    summary: str,
    *,
    cancellation_type: workflow.ActivityCancellationType | None = None,
) -> workflow.ActivityConfig:
    """`preset` with the call's summary (and cancellation type): `**options(KUBE_READ, "...")`.

    One typed dictionary, because mypy cannot tell that a preset holds no `summary` when both are
    passed as keywords."""
    config: workflow.ActivityConfig = {**preset, "summary": summary}
    if cancellation_type is not None:
        config["cancellation_type"] = cancellation_type
    return config


async def cancelled_call_ended(handle: Awaitable[Any]) -> None:
    """Wait until a call started with `WAIT_CANCELLATION_COMPLETED` and then cancelled has ended,
    however it ended (cancelled, completed, failed): the run then ends with no call pending."""
    try:
        await handle
    except (ActivityError, asyncio.CancelledError):
        pass


def bounded(preset: workflow.ActivityConfig, seconds: float) -> workflow.ActivityConfig:
    """`preset` with a `schedule_to_close_timeout`: its retries end after `seconds` in all.

    For calls on a world that may stay away (a Kubernetes outage): past the bound the caller
    sees an `ActivityError` caused by a `TimeoutError` and decides, instead of a retry that
    nobody sees."""
    return {**preset, "schedule_to_close_timeout": timedelta(seconds=seconds)}


def enter_phase(phase: str, details: str, *, log: bool = True) -> None:
    """Show a new phase: the `Phase` search attribute, the workflow's current details, and one
    INFO line in the worker's log (not on replay: the SDK's workflow logger skips replays).

    `log=False` re-shows a phase already logged (the entity re-shows its phase when its details
    change): the log reads one line per step, never the same step twice."""
    workflow.upsert_search_attributes([names.PHASE.value_set(phase)])
    workflow.set_current_details(f"**{phase}**: {details}")
    if log:
        metrics.workflow_phase_entered(phase)
        workflow.logger.info("%s: %s", phase, details)


def set_details(phase: str, details: str) -> None:
    """Update the current details within a phase (no search attribute write)."""
    workflow.set_current_details(f"**{phase}**: {details}")


def describe_failure(err: BaseException) -> str:
    """What ended a run, in words: the chain of Temporal failures down to the root cause, e.g.
    "activity register_host_dpus failed: InvalidInput: DPUDevice ... serialNumber is immutable"."""
    parts: list[str] = []
    current: BaseException | None = err
    while current is not None:
        if isinstance(current, ActivityError):
            parts.append(f"activity {current.activity_type} failed")
        elif isinstance(current, ChildWorkflowError):
            parts.append(f"child workflow {current.workflow_type} {current.workflow_id} ended")
        elif isinstance(current, ApplicationError) and current.type:
            parts.append(f"{current.type}: {current.message}")
        else:
            parts.append(str(current) or type(current).__name__)
        current = current.cause if isinstance(current, FailureError) else None
    return ": ".join(parts)


ABORTED_TYPE: Final = "OperationAborted"


def ending(err: BaseException) -> tuple[str, str]:
    """The final phase of a run that ends early, and why, in words: `cancelled` (the workflow
    was cancelled), `aborted` (an operator's abort) or `failed` (with the cause chain)."""
    if isinstance(err, asyncio.CancelledError | CancelledError):
        return "cancelled", "cancelled (the workflow was cancelled)"
    if isinstance(err, ApplicationError) and err.type == ABORTED_TYPE:
        return "aborted", err.message
    return "failed", describe_failure(err)
