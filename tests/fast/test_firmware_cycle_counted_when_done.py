"""Issue 38: a firmware run said "1 power cycle" just before the cycle happened (its status
counted the cycle as the reboot started). Words say what is done apart from what is about to be:
an attempt from the reboot's start, a power cycle once the reboot has ended."""

from __future__ import annotations

from metalflow.operation_progress import describe_operation
from workflows.firmware.state import power_cycle_counts


def test_a_cycle_counts_once_its_reboot_has_ended() -> None:
    assert power_cycle_counts(False, None) == (0, 0)  # staging: nothing asked of the BMC
    assert power_cycle_counts(True, None) == (1, 0)  # the reboot runs: about to cycle
    assert power_cycle_counts(True, 4) == (1, 1)  # the reboot reached generation 4: cycled


def test_the_line_says_the_attempt_in_flight_not_a_cycle_done() -> None:
    attempts, cycled = power_cycle_counts(True, None)
    status = {"phase": "power-cycling", "power_cycles_issued": cycled, "reboot_attempts": attempts}
    # The reboot in flight is no attempt in words (an attempt is a reboot the BMC refused: i38p)
    assert describe_operation(status) == "power-cycling; 0 power cycles"
    attempts, cycled = power_cycle_counts(True, 2)
    status = {"phase": "waiting-for-dpus", "power_cycles_issued": cycled, "reboot_attempts": attempts}
    assert describe_operation(status) == "waiting-for-dpus; 1 power cycle"
