"""The demo names a failed host's cause with "failed" once (issue 38: `demo:   failed host-003:
failed: DPUFailed: ...`)."""

from __future__ import annotations

from contracts.models.campaign_progress import Failure
from metalflow.devstack.demo_campaign import failure_line


def test_the_demo_says_failed_once() -> None:
    failure = Failure(
        host_id="host-003", reason="failed: DPUFailed: DPU node-host-003-device-host-003-dpu-0 in Error"
    )
    assert failure_line(failure) == (
        "demo:   failed host-003: DPUFailed: DPU node-host-003-device-host-003-dpu-0 in Error"
    )
