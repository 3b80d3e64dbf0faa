"""`make bench`'s goals (bench/run_all.py) and the per-BMC politeness figures they check
(bench/politeness.py, issue 37 item 5): one request at a time per BMC, and no BMC with more of
its Systems power-cycling at once than the fleet-wide per-BMC limit the workers ran with."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from politeness import politeness  # noqa: E402
from run_all import GOALS, goals  # noqa: E402


def load(in_flight: int, per_minute: int, off: int = 0) -> dict[str, int]:
    return {
        "requests_in_flight_peak": in_flight,
        "requests_per_minute_peak": per_minute,
        "systems_off_peak": off,
    }


def test_politeness_takes_the_worst_bmc_of_each_figure() -> None:
    loads = {
        "host-001": load(1, 14, 1),
        "host-001-dpu-0": load(2, 9),
        "host-002": load(1, 30, 1),
        "chassis-1": load(1, 12, 2),
    }
    found = politeness(loads, {"host-001", "host-002", "chassis-1"}, limit=2)
    assert (found["bmc_max_in_flight"], found["bmc_max_per_minute"], found["bmc_max_power_cycling"]) == (
        2,
        30,
        2,
    )
    assert found["bmc_power_cycling_limit"] == 2
    assert (found["bmcs_read"], found["bmcs_over_one_in_flight"]) == (4, 1)
    assert found["bmc_max_in_flight_at"] == ["host-001-dpu-0"]
    assert found["bmc_max_per_minute_at"] == ["host-002"]
    assert found["bmc_max_power_cycling_at"] == ["chassis-1"]


def test_a_dpu_bmc_is_no_power_cycling_bmc() -> None:
    found = politeness({"host-001-dpu-0": load(1, 3, 5), "host-001": load(1, 6, 1)}, {"host-001"}, limit=1)
    assert found["bmc_max_power_cycling"] == 1


def test_nothing_read_is_nothing_measured() -> None:
    found = politeness({}, set(), limit=2)
    assert (found["bmc_max_in_flight"], found["bmc_max_per_minute"], found["bmc_max_power_cycling"]) == (
        None, None, None,
    )  # fmt: skip
    assert goals(found)["bmc_max_in_flight"]["met"] is None


def test_the_politeness_goals_are_checked() -> None:
    assert GOALS["bmc_max_in_flight"] == 1
    polite = goals({"bmc_max_in_flight": 1, "bmc_max_power_cycling": 2, "bmc_power_cycling_limit": 2})
    assert polite["bmc_max_in_flight"] == {"measured": 1, "goal": "<= 1", "met": True}
    assert polite["bmc_max_power_cycling"] == {
        "measured": 2, "goal": "<= 2 (bmc_power_cycling_limit)", "met": True,
    }  # fmt: skip
    rude = goals({"bmc_max_in_flight": 2, "bmc_max_power_cycling": 2, "bmc_power_cycling_limit": 1})
    assert (rude["bmc_max_in_flight"]["met"], rude["bmc_max_power_cycling"]["met"]) == (False, False)


def test_a_goal_whose_bound_was_not_measured_is_not_met_or_missed() -> None:
    found = goals({"bmc_max_power_cycling": 1})
    assert found["bmc_max_power_cycling"] == {
        "measured": 1, "goal": "<= (not measured) (bmc_power_cycling_limit)", "met": None,
    }  # fmt: skip


def test_the_numeric_goals_read_as_before() -> None:
    found = goals({"events_per_host": 120, "cpu_vs_ideal": 1.2})
    assert found["events_per_host"] == {"measured": 120, "goal": "<= 115", "met": False}
    assert found["cpu_vs_ideal"]["met"] is True
    assert found["actions_per_host"]["met"] is None
