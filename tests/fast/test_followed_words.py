"""What a followed operation says it waits for, in the words of what it does (issue 38): a
rollback's PodGangs wait to be Ready at the previous version, never "the new version"; a reboot's
power cycle is said for every BMC, one without PowerCycle (ForceOff then On) included."""

from __future__ import annotations

from contracts.models.grove import RolloutStatus
from metalflow.cli.rollout import in_flight_words
from metalflow.seen import seen_without_status


def test_a_rollback_waits_for_the_previous_version_and_a_roll_for_the_new() -> None:
    rolling = RolloutStatus.model_construct(in_flight=["inference-0-1"], rolling_back=False)
    back = RolloutStatus.model_construct(in_flight=["inference-0-1"], rolling_back=True)
    assert in_flight_words(rolling) == "inference-0-1 whole and Ready at the new version"
    assert in_flight_words(back) == "inference-0-1 whole and Ready at the previous version (rolling back)"
    assert in_flight_words(RolloutStatus.model_construct(in_flight=[], rolling_back=True)) == ""


def test_a_power_cycle_is_not_said_as_the_bmcs_own_powercycle() -> None:
    seen = seen_without_status("powering", None, "h-001")
    assert "ForceOff then On" in seen.waiting_for and "the BMC's power cycle" not in seen.waiting_for


def test_a_rollout_steps_details_do_not_repeat_its_phase() -> None:
    from workflows.rollout.workflow import step_details

    assert step_details("roll", {"inf-0-1", "inf-0-0"}) == "replacing the stale pods of inf-0-0, inf-0-1"
    assert step_details("rollback", {"inf-0-0"}) == "putting back the pods of inf-0-0"
    assert not any(step_details(k, {"g"}).startswith(f"{k}:") for k in ("roll", "rollback", "repair"))
