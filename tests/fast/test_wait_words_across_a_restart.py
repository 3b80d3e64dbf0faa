"""Issue 38: `host reboot H --power-down-wait 30 --wait`, the worker killed mid-wait and started
again: the `--wait` progress printed a stray line in the UI's format (`rebooted: generation 1 by
ForceOff+On`: the reboot's final phase and current details, answered by the restarted worker
replaying the run's last task before it closed) and a "since" re-anchored at the restart (a
query no worker answered gave the phase alone, a new step; the full reading after the restart
another). `seen_without_status` keeps the CLI's words; `follow_operation` keeps what it showed
while no worker answers, and dates a power-down wait from the host's Off."""

from __future__ import annotations

from datetime import UTC, datetime

from metalflow.seen import FINISHING, seen_without_status
from workflows.host_reboot.failure import power_down_off_since, power_down_words

HOST = "h-002"
OFF = datetime(2026, 11, 29, 10, 12, 33, tzinfo=UTC)
ON = datetime(2026, 11, 29, 10, 13, 3, tzinfo=UTC)


def test_a_final_phase_reads_finishing_never_the_uis_line() -> None:
    seen = seen_without_status("rebooted", "**rebooted**: generation 1 by ForceOff+On", HOST)
    assert seen.text == FINISHING and seen.phase == FINISHING
    assert seen.waiting_for == "its run to close and its host to record the end (generation 1 by ForceOff+On)"
    assert "**" not in seen.text + seen.waiting_for


def test_details_set_in_another_phase_lose_their_ui_prefix() -> None:
    seen = seen_without_status("checking", "**queued**: something else", HOST)
    assert seen.text == "checking: something else", seen


def test_a_power_down_wait_is_dated_from_the_host_off() -> None:
    words = power_down_words(HOST, OFF, ON, "", "")
    seen = seen_without_status("powering", f"**powering**: {words}", HOST)
    assert seen.waiting_for == words and seen.since == OFF and not seen.partial
    read = power_down_words(HOST, OFF, ON, "read 2026-11-29T10:12:53Z", "; its power read every 30 s")
    assert power_down_off_since(read) == OFF
    assert (
        power_down_off_since("the power cycle of h-002 (its BMC's PowerCycle, or ForceOff then On)") is None
    )


def test_details_no_worker_answered_are_partial() -> None:
    seen = seen_without_status("powering", None, HOST)
    assert (
        seen.partial
        and seen.waiting_for == f"the power cycle of {HOST} (its BMC's PowerCycle, or ForceOff then On)"
    )
