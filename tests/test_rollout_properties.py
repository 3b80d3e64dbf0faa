"""The rollout step rules' properties (`tests/rollout_steps_support.py`) at depth: 300
derandomized examples each, where the fast tier (`tests/fast/test_rollout_steps.py`) runs 40 and
proves each property fails on a broken implementation. More random PodCliqueSet shapes, partial
progress and failures for the same invariants: never below minAvailable unless allowed, one
PodGang of a replica in flight, GREP order forward and back, no mixed versions, the loop ends."""

from __future__ import annotations

from hypothesis import settings
from rollout_steps_support import check_mixed, check_mixed_gangs, check_outage, check_rollout

from workflows.rollout import steps

DEEP = settings(max_examples=300, deadline=None, database=None, derandomize=True)


def test_rollout_order_concurrency_and_no_mix() -> None:
    check_rollout(steps.next_steps, DEEP)


def test_rollback_from_any_partial_progress_keeps_the_order() -> None:
    check_rollout(steps.next_steps, DEEP, back=True)


def test_outage_is_exactly_a_broken_min_available() -> None:
    check_outage(steps.outage, DEEP)


def test_mixed_is_exactly_two_versions_in_one_gang() -> None:
    check_mixed(steps.mixed, DEEP)


def test_mixed_gangs_finds_exactly_the_mixed_ones() -> None:
    check_mixed_gangs(DEEP)
