"""The activity options of a host's power cycle: the presets every power action on a host's BMC
shares (the reboot's `power_cycle_host`, a reset's DPU resets).

- `POWER_CYCLE_ATTEMPTS`: a power cycle's retries end, so a dead BMC turns into a manual reboot
  (or an operator's decision) instead of retries nobody sees.
- `POWER_CYCLE_HEARTBEAT`: short, so a killed worker's cycle resumes soon on another worker.
- `POWER_DOWN_HAND_BACK_SECONDS`: a longer power-down wait is a durable timer of the reboot, not
  time spent heartbeating inside the activity.
- `power_cycle_options`: the options of `power_cycle_host` for a given power-down wait.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from workflows.kernel import NON_RETRYABLE

POWER_CYCLE_ATTEMPTS: Final = 5

POWER_CYCLE_HEARTBEAT: Final = timedelta(seconds=4)
"""Short on purpose: a killed worker's cycle resumes this soon on another worker. (Before each
reset that must not repeat the activity waits until Temporal shows its step, which the metalflow
worker's heartbeat throttle, `activities.heartbeat.HEARTBEAT_THROTTLE`, makes quick.)"""


POWER_DOWN_HAND_BACK_SECONDS: Final = 3.0
"""A power-down wait longer than this is not spent inside `power_cycle_host`: the activity
returns at Off and the reboot waits on a durable timer (`workflows/host_reboot/workflow.py`).
Inside, the activity would heartbeat all the wait long (each beat a billable Action and a server
write); the timer costs one Action, and the second activity one more (figures: bench/README.md,
"workflows/parts/power_cycle_options.py")."""


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
