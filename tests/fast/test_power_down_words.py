"""Issue 38 deliver 1-2: a reboot's power-down wait says since when the host is Off and when it is
turned On (ISO 8601 Z), and every operation that waits on its reboot child names that child for
`host status` and `--wait`. Before, the reboot said "On in N s", which a worker restarted midway
replayed as if the wait began anew, and a reset's (a reprovision's) status named no reboot.
End to end: tests/test_cli_power_down_wait.py, tests/test_power_down_wait.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from metalflow.operation_progress import reboot_child_of
from workflows.host_reboot.failure import power_down_words

OFF = datetime(2026, 11, 29, 10, 12, 23, tzinfo=UTC)


def test_the_power_down_wait_says_since_when_off_and_when_on_not_how_long() -> None:
    on = OFF + timedelta(seconds=40)
    first = power_down_words("h-1", OFF, on, "", "")
    assert first == (
        "power-down wait: h-1 is Off since 2026-11-29T10:12:23Z, On at 2026-11-29T10:13:03Z (a durable timer)"
    )
    read = power_down_words("h-1", OFF, on, "read 2026-11-29T10:12:53Z", "; its power read every 30 s")
    assert read == (
        "power-down wait: h-1 is Off since 2026-11-29T10:12:23Z (read 2026-11-29T10:12:53Z), "
        "On at 2026-11-29T10:13:03Z (a durable timer; its power read every 30 s)"
    )
    assert " in " not in read.partition("(a durable")[0], "no relative time"


def test_each_operation_waiting_on_its_reboot_names_that_reboot() -> None:
    reset = {"phase": "rebooting-host", "boot_generation": 7}
    assert reboot_child_of(reset, "h-1") == "reboot/h-1/generation-7"
    firmware = {"phase": "power-cycling", "boot_generation": 3}
    assert reboot_child_of(firmware, "h-1") == "reboot/h-1/generation-3"
    reprovision = {"phase": "rebooting-host", "boot_generation": 2, "rebooting_to": 3}
    assert reboot_child_of(reprovision, "h-1") == "reboot/h-1/generation-3", "the round's reboot"
    assert reboot_child_of({"phase": "waiting-for-dpus", "boot_generation": 3}, "h-1") is None
    assert reboot_child_of({"phase": "rebooting-host"}, "h-1") is None, "no generation: none"
