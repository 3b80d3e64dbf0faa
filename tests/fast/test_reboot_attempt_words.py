"""A reboot in flight is no reboot attempt to show: an attempt is shown apart only once the BMC
refused one (README "Counts match the hardware"); issue 38 read `0 power cycles (1 reboot
attempt)` while the only cycle was in flight."""

from __future__ import annotations

from metalflow.operation_progress import describe_operation


def line(phase: str, cycles: int, attempts: int) -> str:
    return describe_operation({"phase": phase, "power_cycles_issued": cycles, "reboot_attempts": attempts})


def test_the_reboot_in_flight_is_not_an_attempt_shown_apart() -> None:
    assert line("rebooting-host", 0, 1) == "rebooting-host; 0 power cycles"
    assert line("power-cycling", 1, 1) == "power-cycling; 1 power cycle"
    assert line("waiting-for-dpus", 1, 1) == "waiting-for-dpus; 1 power cycle"


def test_a_refused_reboot_is_shown_with_every_attempt() -> None:
    assert line("rebooting-host", 0, 2) == "rebooting-host; 0 power cycles (2 reboot attempts)"
    assert line("waiting-for-dpus", 1, 3) == "waiting-for-dpus; 1 power cycle (3 reboot attempts)"
    assert line("failed", 0, 1) == "failed; 0 power cycles (1 reboot attempt)"
