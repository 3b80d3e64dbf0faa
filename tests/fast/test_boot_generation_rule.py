"""The boot generation's one rule (workflows/parts/boot_generation.py): it moves exactly once per
power cycle the BMC accepted, whoever's operation it was and however the operation ended, and
never for a cycle the BMC refused or nobody sent; the Event, `host status` and the result agree.

A Hypothesis state machine drives a model of how the workflows use the rule: the entity's count
(`generation_after`), each reboot run's end and result (`reached`), the next reboot's id
(`start_next_reboot`: a generation whose run is `spent` is skipped, a free one taken again), a
reset of the host and its DPUs (`--both`: one cycle, no reboot id). The invariant: after every
step the entity's generation is the number of accepted cycles, the accepted cycles' generations
are 1, 2, 3, ... (none skipped, none twice), and the Events say exactly those. The same machine
run with a broken rule (main's before issue 38: every used id skipped; a refused cycle counted)
fails: the test shows it catches them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from contracts.models.bmc_lease import RebootRunSeen
from workflows.parts import boot_generation
from workflows.parts.boot_generation import RunEnd


@dataclass(frozen=True)
class Rules:
    reached: Callable[[int, bool], int] = boot_generation.reached
    spent: Callable[[int, RunEnd, int | None], bool] = boot_generation.spent
    after: Callable[[int, int | None], int] = boot_generation.generation_after
    by_runs: Callable[[int, list[tuple[RunEnd, int | None]]], int] = boot_generation.reached_by_runs


WHO = ("host reboot", "reprovision", "firmware", "reset --host")  # each runs its cycle as a reboot
ENDINGS = ("completed", "failed", "aborted", "cancelled", "worker killed, then aborted")  # of a reboot
ATTEMPTS = ("accepted", "refused", "not sent")


def machine(rules: Rules) -> type[RuleBasedStateMachine]:
    class HostGenerations(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.known = 0  # the entity's boot generation (`host status`)
            self.runs: dict[int, tuple[RunEnd, int | None]] = {}  # reboot id -> how its run ended
            self.cycles: list[int] = []  # the generation of each cycle the BMC accepted, in order
            self.events: list[int] = []  # `PowerCycleIssued ... for generation N`
            self.disagree: list[tuple[int, int]] = []  # an operation's result vs `host status` then

        def _start_reboot(self, asked: int) -> int:
            """`start_next_reboot`: the first generation from `asked` whose id is not spent."""
            generation = asked
            while generation in self.runs and rules.spent(generation, *self.runs[generation]):
                generation += 1
            return generation

        def _ended(self, reported: int) -> None:
            self.known = rules.after(self.known, reported)
            if reported != self.known:
                self.disagree.append((reported, self.known))

        @rule(
            who=st.sampled_from(WHO),
            attempt=st.sampled_from(ATTEMPTS),
            ending=st.sampled_from(ENDINGS),
            refused_first=st.integers(min_value=0, max_value=2),
        )
        def a_reboot_of_an_operation(self, who: str, attempt: str, ending: str, refused_first: int) -> None:
            """An operation's cycle, after `refused_first` attempts the BMC refused and an operator
            retried (the same generation again: `retry_refused`), then `attempt`, then `ending`."""
            generation = self._start_reboot(self.known + 1)
            for _ in range(refused_first):  # each refused run fails, its id taken again
                self.runs[generation] = (RunEnd.FAILED, None)
                generation = self._start_reboot(generation)
            accepted = attempt == "accepted"
            if accepted:
                # The BMC took it: the run completes with its result however it ends (an abort or a
                # cancel of it too), and says so once.
                self.cycles.append(generation)
                self.events.append(rules.reached(generation, True))
                self.runs[generation] = (RunEnd.COMPLETED, rules.reached(generation, True))
            elif attempt == "refused" and who != "host reboot":
                self.runs[generation] = (RunEnd.FAILED, None)  # escalated: BMCRebootFailed
            elif ending == "cancelled":
                self.runs[generation] = (RunEnd.CANCELLED, None)  # stopped before it sent anything
            else:  # a person's wait (or the lease queue) ended by an abort: completed, not reached
                self.runs[generation] = (RunEnd.COMPLETED, rules.reached(generation, False))
            self._ended(rules.reached(generation, accepted) if accepted else self.known)

        @rule(
            who=st.sampled_from(WHO),
            attempt=st.sampled_from(ATTEMPTS),
            how=st.sampled_from(("cancelled", "terminated")),
        )
        def an_operation_cancelled_or_terminated(self, who: str, attempt: str, how: str) -> None:
            """Its reboot ends (cancelled with it: a cycle the BMC took completes the reboot with
            its result); the operation itself reports nothing (Temporal keeps no result of a
            cancelled or terminated run): the entity reads the reboot runs past its count."""
            generation = self._start_reboot(self.known + 1)
            if attempt == "accepted":
                self.cycles.append(generation)
                self.events.append(rules.reached(generation, True))
                self.runs[generation] = (RunEnd.COMPLETED, rules.reached(generation, True))
            else:
                self.runs[generation] = (RunEnd.CANCELLED, None)
            read = []
            for g in range(self.known + 1, self.known + 11):
                if g not in self.runs or self.runs[g][0] != RunEnd.COMPLETED:
                    break
                read.append(self.runs[g])
            self.known = rules.after(self.known, rules.by_runs(self.known, read))

        @rule(attempt=st.sampled_from(ATTEMPTS), ending=st.sampled_from(ENDINGS))
        def a_reset_of_the_host_and_its_dpus(self, attempt: str, ending: str) -> None:
            """`host reset --both`: ForceOff, the DPU resets, On: one cycle, no reboot id."""
            accepted = attempt == "accepted"
            reached = rules.reached(self.known + 1, accepted)
            if accepted:
                self.cycles.append(self.known + 1)
                self.events.append(reached)
            self._ended(reached)

        @rule()
        def a_reboot_that_still_runs(self) -> None:
            """A reboot an operation terminated by hand left running: its generation is taken."""
            generation = self._start_reboot(self.known + 1)
            self.runs[generation] = (RunEnd.RUNNING, None)
            # It cycles later and completes: nobody reports it, the next start skips past it.
            self.cycles.append(generation)
            self.events.append(generation)
            self.runs[generation] = (RunEnd.COMPLETED, generation)
            self.known = rules.after(self.known, generation)  # the entity learns it (a later op)

        @invariant()
        def once_per_accepted_cycle(self) -> None:
            assert self.cycles == list(range(1, len(self.cycles) + 1)), f"skipped or repeated: {self.cycles}"
            assert self.known == len(self.cycles), (self.known, self.cycles)
            assert self.events == self.cycles, (self.events, self.cycles)
            assert self.disagree == [], f"result vs status: {self.disagree}"

    return HostGenerations


SETTINGS = settings(
    max_examples=100,
    stateful_step_count=10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


BROKEN = settings(SETTINGS, phases=[Phase.generate])  # found is enough: no shrinking


def test_the_generation_moves_once_per_accepted_cycle() -> None:
    run_state_machine_as_test(machine(Rules()), settings=SETTINGS)


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(Rules(spent=lambda g, run, result: True), id="every-used-id-skipped"),
        pytest.param(Rules(reached=lambda g, accepted: g), id="a-refused-cycle-counted"),
        pytest.param(
            Rules(spent=lambda g, run, result: run != RunEnd.FAILED), id="an-aborted-unsent-cycle-skipped"
        ),
        pytest.param(Rules(after=lambda known, reported: known), id="an-ending-not-counted"),
        pytest.param(Rules(by_runs=lambda known, runs: known), id="a-cancelled-operation-not-counted"),
        pytest.param(
            Rules(by_runs=lambda known, runs: known + len(runs) + 1), id="a-cancelled-operation-over-counted"
        ),
    ],
)
def test_a_broken_rule_is_caught(broken: Rules) -> None:
    with pytest.raises((AssertionError, ExceptionGroup)) as caught:  # a group: several distinct failures
        run_state_machine_as_test(machine(broken), settings=BROKEN)
    if isinstance(caught.value, ExceptionGroup):
        assert caught.value.subgroup(AssertionError) is not None, caught.value


@pytest.mark.parametrize(
    ("runs", "reached"),
    [
        ([], 4),
        ([(RunEnd.COMPLETED, 5)], 5),
        ([(RunEnd.COMPLETED, 5), (RunEnd.COMPLETED, 6)], 6),
        ([(RunEnd.COMPLETED, 4)], 4),  # aborted before its cycle
        ([(RunEnd.COMPLETED, 5), (RunEnd.RUNNING, None), (RunEnd.COMPLETED, 7)], 5),
    ],
)
def test_what_a_cancelled_operations_reboots_reached(
    runs: list[tuple[RunEnd, int | None]], reached: int
) -> None:
    assert boot_generation.reached_by_runs(4, runs) == reached


@pytest.mark.parametrize(
    ("asked", "run", "result", "spent"),
    [
        (5, RunEnd.RUNNING, None, True),  # it may yet cycle
        (5, RunEnd.COMPLETED, 5, True),  # it did
        (5, RunEnd.COMPLETED, 4, False),  # aborted before the cycle (a person's wait)
        (5, RunEnd.FAILED, None, False),  # the BMC refused (BMCRebootFailed)
        (5, RunEnd.CANCELLED, None, False),  # stopped before it sent anything
        (5, RunEnd.TERMINATED, None, True),  # unknown: skipped rather than counted twice
        (5, RunEnd.TIMED_OUT, None, True),
    ],
)
def test_which_reboot_ids_are_used_up(asked: int, run: RunEnd, result: int | None, spent: bool) -> None:
    assert boot_generation.spent(asked, run, result) is spent


def test_a_reboot_waiting_for_a_person_refuses_the_next_rather_than_queue_it_unsaid() -> None:
    """The re-attack (B3): a firmware run terminated by hand abandons its reboot, waiting in
    manual-intervention-required; `host reboot` then started the next generation, which waited
    for it (`PreviousRebootRunning`, said only in the worker's log) and `host abort` of it waited
    too. Now the start is refused, naming that reboot and how to end it."""
    rid = "reboot/host-001/generation-3"
    waiting = RebootRunSeen(end="running", phase="manual-intervention-required")
    words = boot_generation.waits_for_a_person(rid, waiting)
    assert words.startswith(f"{rid} still runs and waits for a person (manual-intervention-required"), words
    assert f"`temporal workflow cancel --workflow-id {rid}`" in words, words
    for other in (
        RebootRunSeen(end="running", phase="powering"),  # it ends on its own: the next one waits
        RebootRunSeen(end="terminated", phase="manual-intervention-required"),
        RebootRunSeen(end="completed", boot_generation=3),
    ):
        assert boot_generation.waits_for_a_person(rid, other) == "", other
