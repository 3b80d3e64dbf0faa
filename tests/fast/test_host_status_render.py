"""What `metalflow host status` prints of what the host waits for and until when (issue 38, item
2): a request awaiting approval with when it expires, and each campaign that put the host off
with when it asks again and why, every time ISO 8601 UTC with Z. End to end:
tests/test_operator_now_e2e.py."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.models.campaign import Deferred
from contracts.models.host import HostStatus, OperationRecord
from metalflow.cli.host_status import render_status
from metalflow.seen import as_running

T0 = datetime(2026, 11, 29, 4, 0, tzinfo=UTC)
HELD = OperationRecord(
    operation="reset",
    workflow_id="reset/host-002",
    requested_by="bob",
    outcome="awaiting-approval",
    requested_at=T0,
)


def test_a_request_awaiting_approval_says_until_when() -> None:
    status = HostStatus(
        host_id="host-002", instance="vm-7", boot_generation=0, current=HELD,
        phase="awaiting-approval", approval_expires_at=datetime(2026, 11, 30, 4, 0, tzinfo=UTC),
    )  # fmt: skip
    shown = render_status(status, None).splitlines()
    assert (
        "    waiting for    `metalflow approve host-002` until 2026-11-30T04:00:00Z, then the request expires"
        in shown
    )


def test_a_host_a_campaign_put_off_names_the_campaign_when_and_why() -> None:
    status = HostStatus(host_id="host-002", instance=None, boot_generation=3, current=None)
    later = Deferred(
        host_id="host-002", retry_at=datetime(2026, 11, 29, 4, 5, tzinfo=UTC), reason="host-002 is busy"
    )
    shown = render_status(status, None, deferrals=[("campaign/rack7", later)]).splitlines()
    assert "  deferred by      campaign/rack7 until 2026-11-29T04:05:00Z: host-002 is busy" in shown
    assert not any("deferred" in line for line in render_status(status, None).splitlines())


def test_a_reboot_dpf_asked_for_says_until_when_it_is_due() -> None:
    running = HELD.model_copy(
        update={"operation": "reprovision", "workflow_id": "reprovision/host-002", "outcome": "running"}
    )
    status = HostStatus(
        host_id="host-002", instance=None, boot_generation=0, current=running, phase="running reprovision"
    )
    operation = {
        "phase": "rebooting-host", "waiting_for": "power cycle of host-002",
        "reboot_deadline_at": "2026-11-29T04:30:00+00:00", "power_cycles_issued": 0,
    }  # fmt: skip
    shown = render_status(status, operation).splitlines()
    assert "    reboot due by  2026-11-29T04:30:00Z (DPF's deadline for the reboot it asked for)" in shown
    assert not any(
        "due by" in line
        for line in render_status(status, {**operation, "reboot_deadline_at": None}).splitlines()
    )


def test_a_running_operation_whose_runbook_reached_completed_reads_finishing_not_completed() -> None:
    """Issue 38 deliver 1: while the worker was down, `host status` said `now completed; waiting
    for every DPU Ready ...` for an operation its host records as running (the query replays the
    run's pending task: its final phase, not closed yet). A "now" never says completed then."""
    running = HELD.model_copy(
        update={"operation": "reprovision", "workflow_id": "reprovision/host-002", "outcome": "running"}
    )
    status = HostStatus(
        host_id="host-002", instance=None, boot_generation=1, current=running, phase="running reprovision"
    )
    said = {"phase": "completed", "waiting_for": "every DPU Ready after 1 power cycle"}
    said["power_cycles_issued"] = 1
    now = [line for line in render_status(status, as_running(said)).splitlines() if "now" in line]
    assert now == [
        "    now            finishing; waiting for its run to close and its host to record the end "
        "(every DPU Ready after 1 power cycle); 1 power cycle"
    ]
    failed = as_running({"phase": "failed", "waiting_for": "activity x failed"})
    assert failed["waiting_for"].endswith("(failed: activity x failed)")
    assert as_running({"phase": "rebooting-host"}) == {"phase": "rebooting-host"}, "a running phase as said"


def test_a_new_entity_still_taking_over_says_requests_wait() -> None:
    """A new entity reads what its predecessor left before it answers a request (takeover.py):
    its status says so, so neither an operator nor a script reads the record as final."""
    status = HostStatus(host_id="host-002", instance=None, boot_generation=0, current=None, taking_over=True)
    shown = render_status(status, None).splitlines()
    assert any(line.startswith("  taking over ") and "requests wait" in line for line in shown)
    assert not any(
        "taking over" in line
        for line in render_status(status.model_copy(update={"taking_over": False}), None).splitlines()
    )


def test_an_idle_host_whose_last_end_left_its_power_unread_is_warned_of() -> None:
    """Issue 40: an end whose power read was not answered ("may be OFF") was said only inside
    `recent`; `host status` printed no WARNING. Now one names the run, why it was not read, when
    the entity reads it again, and how to look now (`maybe_off_warning`: no BMC read)."""
    from contracts.models.host import Maintenance
    from metalflow.cli.host_status import maybe_off_warning
    from workflows.host.takeover_rules import outcome_after_read

    run = "reboot/host-002/generation-3"
    ended = OperationRecord(
        operation="reboot", workflow_id=run, requested_by="bob", finished_at=T0,
        outcome=outcome_after_read("terminated", run, "host-002", None, "BMC unreachable"),
    )  # fmt: skip
    again = datetime(2026, 11, 29, 4, 1, tzinfo=UTC)
    status = HostStatus(
        host_id="host-002", instance=None, boot_generation=3, current=None, recent=(ended,),
        maybe_off_after=run, power_read_at=again,
    )  # fmt: skip
    assert maybe_off_warning(status) == (
        f"the host host-002 may be OFF: {run} ended without saying its power and the read at its end "
        "was not answered (its power not read: BMC unreachable); metalflow reads it again at "
        "2026-11-29T04:01:00Z; check now with `metalflow bmc power host-002 status`, and if Off power "
        "it on (`metalflow bmc power host-002 on`)"
    )
    unwatched = status.model_copy(update={"power_read_at": None})
    assert "does not read it again by itself" in (maybe_off_warning(unwatched) or "")
    held = status.model_copy(update={"maintenance": Maintenance(by="bob", reason="x", since=T0)})
    assert "reads it again once maintenance ends" in (maybe_off_warning(held) or "")
    assert maybe_off_warning(status.model_copy(update={"maybe_off_after": ""})) is None


def test_a_dpu_warning_names_the_request_awaiting_approval_not_no_operation() -> None:
    """L4 of issue 40's last attack: `host status` warned `DPU ... is Node Effect, not Ready, and no
    operation runs on HOST` while the monitor's reprovision of that DPU awaited approval."""
    from contracts.models.host import AwaitingRequest
    from metalflow.cli.inventory_check import awaiting_words, not_ready_words, rebooting_words

    asked = HELD.model_copy(
        update={
            "operation": "reprovision",
            "workflow_id": "reprovision/host-002",
            "requested_by": "monitor/h",
        }
    )
    status = HostStatus(
        host_id="host-002", instance="vm-7", boot_generation=0, current=asked, phase="awaiting-approval",
        awaiting=AwaitingRequest(operation="reprovision", dpu_ids=("host-002-dpu-1",)),
    )  # fmt: skip
    awaiting = awaiting_words(status)
    assert awaiting == (
        "reprovision of host-002-dpu-1 (reprovision/host-002, requested by monitor/h) awaits approval: "
        "`metalflow approve host-002` runs it, `metalflow host abort host-002` withdraws it"
    )
    dpu = "node-host-002-device-host-002-dpu-1"
    assert not_ready_words(dpu, "Node Effect", "host-002", awaiting) == (
        f"DPU {dpu} is Node Effect, not Ready; {awaiting}"
    )
    assert "no operation runs" not in rebooting_words(dpu, "host-002", "", awaiting)
    # Nothing awaits approval (idle, or the operation runs): the words as before.
    for current in (None, asked.model_copy(update={"outcome": "running"})):
        assert awaiting_words(status.model_copy(update={"current": current, "awaiting": None})) == ""
    assert not_ready_words(dpu, "Node Effect", "host-002") == (
        f"DPU {dpu} is Node Effect, not Ready, and no operation runs on host-002"
    )
