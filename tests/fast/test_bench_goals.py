"""`make bench`'s goals (bench/run_all.py): issue 37's Deliver 4 (requests, events, Actions, the
idle site watch, CPU bounds, reaction) and the per-BMC politeness figures of its item 5
(bench/politeness.py): one request at a time per BMC, and no BMC with more of its Systems
power-cycling at once than the fleet-wide per-BMC limit the workers ran with."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from actions import idle_watch_actions_per_day  # noqa: E402
from politeness import politeness  # noqa: E402
from run_all import FLEET, GOALS, goals  # noqa: E402


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
    assert found["events_per_host"] == {"measured": 120, "goal": "<= 100", "met": False}
    assert found["cpu_vs_ideal"]["met"] is True
    assert found["actions_per_host"]["met"] is None


def test_the_goals_are_issue_37s_deliver_4() -> None:
    """Not issue 28's bounds (cpu 1.3, server 1.4, events 115, no request or watch goal)."""
    numeric = {name: bound for name, bound in GOALS.items() if not isinstance(bound, str)}
    assert numeric == {
        "redfish_requests_per_cycle": 6.5, "k8s_requests_per_dpu": 8, "events_per_host": 100,
        "actions_per_host": 40, "site_watch_idle_actions_per_day": 2000, "cpu_vs_ideal": 1.5,
        "server_cpu_vs_ideal": 1.7, "reboot_burst_all_reset_s": 30, "reaction_paced_median_s": 0.5,
        "reaction_paced_p99_s": 2.0, "bmc_max_in_flight": 1,
    }  # fmt: skip
    # Each goal's figure is one `make bench` takes from the fleet benchmark.
    assert set(GOALS) <= set(FLEET)
    found = goals({"redfish_requests_per_cycle": 14.92, "k8s_requests_per_dpu": 8, "cpu_vs_ideal": 1.72})
    assert found["redfish_requests_per_cycle"] == {"measured": 14.92, "goal": "<= 6.5", "met": False}
    assert (found["k8s_requests_per_dpu"]["met"], found["cpu_vs_ideal"]["met"]) == (True, False)


def test_the_idle_site_watch_costs_its_share_of_the_beats_and_its_own_actions_a_day() -> None:
    # Two watches beating once a second each over 60 s, and 3 Actions of the watch's history.
    assert idle_watch_actions_per_day(120, 2, 3, 60.0) == (60 + 3) * 1440
    assert goals({"site_watch_idle_actions_per_day": 90_720})["site_watch_idle_actions_per_day"] == {
        "measured": 90_720, "goal": "<= 2000", "met": False,
    }  # fmt: skip
    # One beat a minute of one watch is within the goal (1,440 a day).
    assert idle_watch_actions_per_day(1, 1, 0, 60.0) == 1440
    assert (idle_watch_actions_per_day(5, 0, 0, 60.0), idle_watch_actions_per_day(5, 2, 0, 0.0)) == (
        None,
        None,
    )
