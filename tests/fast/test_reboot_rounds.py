"""The reboot-rounds part (`workflows/parts/reboot_rounds.py`) and the host operation's bounded
Kubernetes calls (`workflows/host_operation/kube_calls.py`), without a server.

The part's waits and stops run against a stand-in runbook (its `wait` polls the condition and
raises the abort, as `kernel.Runbook.wait` does) and stand-in reboot children (futures with an id
and a signal), with `start_next_reboot` replaced: what is tested is what the part does with a
reboot that ends, fails, is refused by its BMC, or is stopped midway. The end-to-end tests
(test_host_operation_endings, test_host_operation_barrier, test_host_reset, test_firmware) run it
against real children.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from contracts.errors import BMCRebootFailed, BMCUnavailable, OperationAborted
from contracts.models.control import OperatorRequest
from contracts.models.host import HostRebootInput, HostRebootResult
from contracts.models.power_watch import RebootNow
from contracts.wording import with_its_reboot
from workflows.host_operation import kube_calls
from workflows.parts import reboot_rounds
from workflows.parts.reboot_rounds import ABANDON, RebootRounds, bmc_refusal

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
ALICE = OperatorRequest(requested_by="alice", reason="rebooted it")


def result(method: str = "bmc:PowerCycle", already_done: bool = False) -> HostRebootResult:
    done = already_done
    return HostRebootResult(host_id="h", boot_generation=5, method=method, finished_at=T0, already_done=done)


def child_failure(cause: BaseException) -> ChildWorkflowError:
    err = ChildWorkflowError(
        "child failed", namespace="default", workflow_id="reboot/h/generation-5", run_id="r",
        workflow_type="HostRebootWorkflow", initiated_event_id=1, started_event_id=2, retry_state=None,
    )  # fmt: skip
    err.__cause__ = cause
    return err


class Child(asyncio.Future[HostRebootResult]):
    """A reboot child: `cancel` is a cancel request, answered as `on_cancel` says (a reboot cut
    short completes with its result; one stopped before the BMC was touched ends cancelled)."""

    def __init__(self, on_cancel: HostRebootResult | BaseException | None = None) -> None:
        super().__init__()
        self.id = "reboot/h/generation-5"
        self.cancels = 0
        self.signals: list[OperatorRequest] = []
        self.on_cancel = on_cancel

    def cancel(self, msg: Any = None) -> bool:
        self.cancels += 1
        if isinstance(self.on_cancel, HostRebootResult):
            self.set_result(self.on_cancel)
        else:
            self.set_exception(self.on_cancel or child_failure(CancelledError("cancelled")))
        return True

    async def signal(self, name: str, arg: OperatorRequest) -> None:
        if self.done():
            raise ApplicationError("workflow execution already completed", type="NotFound")
        self.signals.append(arg)


class Runbook:
    """`kernel.Runbook.wait`'s contract: True once the condition holds; an abort raises."""

    def __init__(self) -> None:
        self.aborting = False

    async def wait(self, condition: Callable[[], bool], *, abortable: bool = True) -> bool:
        while True:
            if abortable and self.aborting:
                raise OperationAborted("aborted by alice")
            if condition():
                return True
            await asyncio.sleep(0)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Child, dict[str, Any]]]:
    """Replace `start_next_reboot`: each start hands out the next child of this list, and notes
    how it was asked for."""
    children: list[tuple[Child, dict[str, Any]]] = []

    async def start_next(request: HostRebootInput, **options: Any) -> tuple[Child, int]:
        child, seen = next((c, o) for c, o in children if not o)
        seen.update(options, request=request)
        return child, request.boot_generation

    monkeypatch.setattr(reboot_rounds, "start_next_reboot", start_next)
    monkeypatch.setattr(reboot_rounds.workflow, "logger", logging.getLogger("reboot_rounds"))  # no workflow
    return children


REBOOT = HostRebootInput(host_id="h", boot_generation=5, requested_by="pytest")
REQUEST_CANCEL = reboot_rounds.workflow.ParentClosePolicy.REQUEST_CANCEL


async def rounds_with(
    started: list[tuple[Child, dict[str, Any]]], child: Child, **options: Any
) -> tuple[RebootRounds, Runbook]:
    runbook = Runbook()
    started.append((child, {}))
    rounds = RebootRounds(runbook)  # type: ignore[arg-type]  # the stand-in has the part's one need
    options = {"parent_close_policy": REQUEST_CANCEL, **options}
    generation = await rounds.start(REBOOT, summary="reboot", **options)
    assert generation == 5 and rounds.rebooting_to == 5 and rounds.child is child
    return rounds, runbook


# -- what a reboot's end means ------------------------------------------------------------------


def test_a_power_cycle_of_ours_is_the_bmcs_and_not_one_someone_else_made() -> None:
    assert reboot_rounds.RebootOutcome(5, result()).power_cycle
    assert not reboot_rounds.RebootOutcome(5, result(method="manual")).power_cycle
    taken = reboot_rounds.RebootOutcome(5, result(already_done=True))
    assert taken.already_done and not taken.power_cycle


def test_a_bmc_refusal_is_told_from_any_other_failure() -> None:
    words = "the BMC of h rejected the credentials (BMCAuthenticationFailed: 401)"
    assert bmc_refusal(child_failure(BMCRebootFailed(words))) == words
    assert bmc_refusal(child_failure(ApplicationError("boom", type="RebootFailed"))) is None
    assert bmc_refusal(child_failure(CancelledError("cancelled"))) is None


# -- wait, stop, confirm -------------------------------------------------------------------------


async def test_a_reboot_that_ends_is_its_outcome_and_no_longer_in_flight(started: Any) -> None:
    child = Child()
    rounds, _ = await rounds_with(started, child)
    child.set_result(result())
    outcome = await rounds.wait()
    assert (outcome.generation, outcome.power_cycle) == (5, True)
    assert rounds.child is None and rounds.rebooting_to is None
    assert await rounds.stop() is None and child.cancels == 0


async def test_a_failed_reboot_is_raised_as_the_childs_failure(started: Any) -> None:
    child = Child()
    rounds, _ = await rounds_with(started, child)
    child.set_exception(child_failure(BMCRebootFailed("the BMC of h is unreachable")))
    with pytest.raises(ChildWorkflowError) as failed:
        await rounds.wait()
    assert bmc_refusal(failed.value) == "the BMC of h is unreachable" and rounds.child is None


async def test_an_abort_stops_the_reboot_and_the_cleanup_counts_what_it_did_once(started: Any) -> None:
    child = Child(on_cancel=result(method="bmc:PowerCycle, cut short: On sent at once"))
    rounds, runbook = await rounds_with(started, child)
    runbook.aborting = True
    with pytest.raises(OperationAborted):
        await rounds.wait()
    assert child.cancels == 1  # stopped before the abort was raised
    stopped = await rounds.stop()
    assert stopped is not None and stopped.power_cycle and stopped.generation == 5
    assert await rounds.stop() is None  # counted once


async def test_a_cancel_of_the_workflow_stops_the_reboot_too(started: Any) -> None:
    child = Child(on_cancel=result(method="bmc:PowerCycle, cut short: On sent at once"))
    rounds, _ = await rounds_with(started, child)
    waiting = asyncio.ensure_future(rounds.wait())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert child.cancels == 1
    stopped = await rounds.stop()
    assert stopped is not None and stopped.generation == 5


async def test_a_reboot_stopped_before_it_rebooted_leaves_nothing_to_count(started: Any) -> None:
    child = Child()  # cancelled while queued for the lease: ends cancelled
    rounds, _ = await rounds_with(started, child)
    assert await rounds.stop() is None and child.cancels == 1 and rounds.child is None


async def test_an_abandoned_reboot_is_never_stopped(started: Any) -> None:
    child = Child()
    rounds, _ = await rounds_with(started, child, cancellation_type=ABANDON)
    assert started[0][1]["cancellation_type"] == ABANDON
    assert await rounds.stop() is None and child.cancels == 0 and not child.done()


async def test_a_confirmation_goes_to_the_reboot_in_flight_and_a_late_one_is_answered_not_raised(
    started: Any,
) -> None:
    child = Child()
    rounds, _ = await rounds_with(started, child)
    assert await rounds.confirm(ALICE) is None and child.signals == [ALICE]
    child.set_result(result(method="manual"))  # the reboot closed as the confirmation came
    late = await rounds.confirm(ALICE)
    assert late is not None and late.startswith(f"the reboot {child.id} had already ended")


async def test_a_refused_generation_is_asked_again_under_its_own_id(started: Any) -> None:
    await rounds_with(started, Child(), retry_refused=True)
    told = REBOOT.model_copy(update={"tell_parent": True})  # its wait's words come back (`heard`)
    assert started[0][1]["retry_refused"] is True and started[0][1]["request"] == told


# -- its reboot's wait in the caller's own details (issue 38) ----------------------------------


WAIT_WORDS = (
    "power-down wait: h is Off since 2026-12-01T08:00:00Z, On at 2026-12-01T08:02:00Z (a durable timer)"
)


async def test_the_callers_details_say_what_its_reboot_in_flight_waits_for_in_the_clis_words(
    started: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its Temporal UI details said only "power cycle of h to generation 5" while the reboot
    waited out its power-down wait; `host status` said the wait. Now both say it, in one wording."""
    shown: list[tuple[str, str]] = []
    monkeypatch.setattr(reboot_rounds.kernel, "set_details", lambda phase, said: shown.append((phase, said)))
    rounds, runbook = await rounds_with(started, Child())
    runbook.phase, runbook.details = "rebooting-host", "power cycle of h to generation 5"  # type: ignore[attr-defined]
    rounds.heard(RebootNow(reboot_id="reboot/h/generation-4", phase="powering", details=WAIT_WORDS))
    assert shown == []  # a reboot no longer in flight: its words are dropped
    rounds.heard(RebootNow(reboot_id="reboot/h/generation-5", phase="powering", details=WAIT_WORDS))
    said = f"power cycle of h to generation 5; its reboot reboot/h/generation-5: powering: {WAIT_WORDS}"
    assert shown == [("rebooting-host", said)]
    assert runbook.details == "power cycle of h to generation 5"  # its status (the CLI adds the live line)
    status = {"waiting_for": runbook.details}  # what `host status` prints after "now "
    cli = with_its_reboot(status["waiting_for"], "reboot/h/generation-5", "powering", WAIT_WORDS)
    assert cli == said


async def test_the_caller_hears_nothing_once_no_reboot_is_in_flight(
    started: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown: list[str] = []
    monkeypatch.setattr(reboot_rounds.kernel, "set_details", lambda phase, details: shown.append(details))
    child = Child()
    rounds, _ = await rounds_with(started, child)
    child.set_result(result())
    await rounds.wait()
    rounds.heard(RebootNow(reboot_id=child.id, phase="powering", details=WAIT_WORDS))
    assert shown == []


# -- bounded Kubernetes calls --------------------------------------------------------------------


def activity_failure(cause: BaseException, retry_state: RetryState | None = None) -> ActivityError:
    err = ActivityError(
        "activity failed", scheduled_event_id=1, started_event_id=2, identity="w",
        activity_type="release_node_effect_hold", activity_id="1", retry_state=retry_state,
    )  # fmt: skip
    err.__cause__ = cause
    return err


def test_a_call_past_its_bound_is_told_from_a_failure_and_names_its_last_error() -> None:
    last = BMCUnavailable("503 from the API server")
    timed = TimeoutError("activity timeout", type=TimeoutType.SCHEDULE_TO_CLOSE, last_heartbeat_details=())
    timed.__cause__ = last
    assert kube_calls.timed_out(activity_failure(timed))
    assert kube_calls.timed_out(activity_failure(last, RetryState.TIMEOUT))
    assert not kube_calls.timed_out(activity_failure(last, RetryState.NON_RETRYABLE_FAILURE))
    words = kube_calls.stalled("release the hold", 900, activity_failure(timed))
    assert words == (
        "the Kubernetes call `release the hold` did not succeed within 900 s "
        "(last error: BMCUnavailable: 503 from the API server)"
    )
