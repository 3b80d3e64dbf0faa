"""The rollout's step rules (`workflows/rollout/steps.py`) against their properties
(`tests/rollout_steps_support.py`: never below minAvailable unless allowed, one PodGang of a
replica in flight, GREP order forward and back, no mixed versions, the loop ends), quickly:
40 derandomized examples each. `tests/test_rollout_properties.py` runs the same properties
deeper in `make test`.

Each property is also run on a deliberately broken implementation and must fail there
(`test_*_fails_on_a_broken_*`): the proof that the property can fail. Those runs stop at the
first counterexample (no shrinking: the failure is the point, not its smallest form)."""

from __future__ import annotations

import traceback

import pytest
from hypothesis import Phase, settings
from rollout_steps_support import check_mixed, check_mixed_gangs, check_outage, check_rollout

from contracts.models.grove import GangState, PCSState
from workflows.rollout import steps

QUICK = settings(max_examples=40, deadline=None, database=None, derandomize=True)
UNTIL_FAILED = settings(QUICK, max_examples=100, phases=(Phase.explicit, Phase.generate))


# -- the real implementation passes ----------------------------------------------------------------------
def test_rollout_order_concurrency_and_no_mix() -> None:
    check_rollout(steps.next_steps, QUICK)


def test_rollback_from_any_partial_progress_keeps_the_order() -> None:
    check_rollout(steps.next_steps, QUICK, back=True)


def test_outage_is_exactly_a_broken_min_available() -> None:
    check_outage(steps.outage, QUICK)


def test_mixed_is_exactly_two_versions_in_one_gang() -> None:
    check_mixed(steps.mixed, QUICK)


def test_mixed_gangs_finds_exactly_the_mixed_ones() -> None:
    check_mixed_gangs(QUICK)


# -- and each property fails on a deliberately broken implementation ---------------------------------------
def tails_first(state: PCSState, targets: dict[str, str], concurrency: int) -> list[GangState]:
    """Broken: a replica's tails before its anchor."""
    chosen = []
    for gangs in steps.by_replica(state).values():
        pending = sorted((g for g in gangs if steps.needs_roll(g, targets)), key=lambda g: g.role == "Anchor")
        if pending:
            chosen.append(pending[0])
        if len(chosen) >= concurrency:
            break
    return chosen


def two_per_replica(state: PCSState, targets: dict[str, str], concurrency: int) -> list[GangState]:
    """Broken: a replica's next two PodGangs at once."""
    chosen = []
    for gangs in steps.by_replica(state).values():
        chosen += [g for g in gangs if steps.needs_roll(g, targets)][:2]
        if len(chosen) >= concurrency:
            break
    return chosen[: max(concurrency, 2)]


def standalone_only(state: PCSState, gang: GangState, targets: dict[str, str]) -> list[str]:
    """Broken: forgets the scaling groups' minAvailable."""
    return [r for r in steps.outage(state, gang, targets) if r.startswith("PodClique")]


def first_group_only(gang: GangState, versions: list[dict[str, str]]) -> bool:
    """Broken: looks at one podgroup only."""
    return steps.mixed(gang.model_copy(update={"groups": gang.groups[:1]}), versions)


def test_the_order_property_fails_on_a_broken_selector_tails_first() -> None:
    with pytest.raises(AssertionError, match="before its anchor"):
        check_rollout(tails_first, UNTIL_FAILED)


def test_the_concurrency_property_fails_on_a_broken_selector_two_per_replica() -> None:
    with pytest.raises(AssertionError) as failed:
        check_rollout(two_per_replica, UNTIL_FAILED)
    assert "two gangs of one replica" in "".join(traceback.format_exception(failed.value))


def test_the_outage_property_fails_on_a_broken_guard() -> None:
    with pytest.raises(AssertionError):
        check_outage(standalone_only, UNTIL_FAILED)


def test_the_mix_property_fails_on_a_broken_detector() -> None:
    with pytest.raises(AssertionError):
        check_mixed(first_group_only, UNTIL_FAILED)
