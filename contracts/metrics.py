"""metalflow's own metrics, recorded through the Temporal SDK's metric meter.

Workflows call the `workflow_*` helpers, activities the `activity_*` ones; each is a one-liner at
the call site. They go through `workflow.metric_meter()` / `activity.metric_meter()`, so they are
exported by the same runtime, on the same Prometheus endpoint, as the SDK's own metrics
(`metalflow.runtime.observability`), and a workflow's increments are skipped while it replays (a worker
that picks up a history after a crash does not count an operation twice). A workflow task that
failed or timed out before its completion was recorded (the deadlock detector, the task timeout
on an overloaded worker, a completion the server refused because a signal arrived meanwhile:
`UNHANDLED_COMMAND`) runs again for real on its next attempt. An operation's start and end are
therefore counted once per run id per worker process (`contracts.counted_runs`): exact unless the
retried task went to another worker process, where they count again (at least once). The other
counters are at least once, and exact unless a workflow task was retried. Outside a workflow or
activity (the `metalflow bmc` CLI drives the Redfish client directly) they do nothing.

Exported names (Prometheus, with the `metalflow_` prefix the helpers add):

| metric | kind | labels |
| --- | --- | --- |
| `metalflow_operations_started` | counter | `kind` (provision, reprovision, reboot, firmware, ...) |
| `metalflow_operations_finished` | counter | `kind`, `outcome` (succeeded, failed, aborted, cancelled) |

Every operation kind counts its start and its end in one place, the kernel's `to_the_end`
(`workflows/kernel.py`: a run that sets `operation_kind`); a reboot round inside another
operation is that operation's step, not a `reboot` of its own.
| `metalflow_phase_entered` | counter | `phase` (e.g. manual-intervention-required) |
| `metalflow_power_cycles` | counter | `method` (PowerCycle, ForceOff+On, On), `already_done`, `bmc` |
| `metalflow_bmc_requests` | counter | `bmc`, `status` (HTTP status class, or timeout/unreachable) |
| `metalflow_bmc_request_seconds` | histogram | `bmc` |
| `metalflow_dpf_watch_reconnects` | counter | none |
| `metalflow_hosts_in_manual_intervention` | gauge | none (from Temporal visibility, per scrape) |
| `metalflow_hosts_in_maintenance` | gauge | none (from Temporal visibility, per scrape) |
| `metalflow_host_maintenance_since_seconds` | gauge | `host_id`, `by` (unix seconds; visibility) |

Cost: one counter add per event, in process; the meter aggregates, nothing is sent per event.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Protocol, TypeVar

from temporalio import activity, workflow
from temporalio.common import MetricMeter

from contracts.errors import abort_in_words

with workflow.unsafe.imports_passed_through():  # one record per process, shared by every sandbox
    from contracts import counted_runs

PREFIX = "metalflow_"


class _PowerCycleOutcome(Protocol):
    @property
    def bmc_id(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def already_done(self) -> bool: ...


R = TypeVar("R", bound=_PowerCycleOutcome)


def _workflow_meter() -> MetricMeter | None:
    return workflow.metric_meter() if workflow.in_workflow() else None


def _activity_meter() -> MetricMeter | None:
    return activity.metric_meter() if activity.in_activity() else None


def _first_time(what: str) -> bool:
    """True the first time this process counts `what` for the current workflow run."""
    return counted_runs.first_time(workflow.info().run_id, what)


def workflow_operation_started(kind: str | None) -> None:
    """An operation (a host workflow's run) began; nothing for no `kind` (no operation)."""
    if kind and (meter := _workflow_meter()) is not None and _first_time("started"):
        meter.create_counter(PREFIX + "operations_started", "operations started").add(1, {"kind": kind})


def workflow_operation_finished(kind: str, outcome: str) -> None:
    """An operation ended: `succeeded`, `failed`, `aborted` or `cancelled`; once per run id in
    this process (a retried workflow task runs the end path again: `contracts.counted_runs`)."""
    if (meter := _workflow_meter()) is not None and _first_time("finished"):
        meter.create_counter(PREFIX + "operations_finished", "operations finished").add(
            1, {"kind": kind, "outcome": outcome}
        )


def workflow_operation_ended(kind: str | None, phase: str, error: BaseException | None = None) -> None:
    """An operation ended: `succeeded` without `error`, `aborted` when its final `phase` says so,
    else as `error` says (`outcome_of`); nothing for no `kind` (no operation)."""
    if kind:
        outcome = "succeeded" if error is None else "aborted" if phase == "aborted" else outcome_of(error)
        workflow_operation_finished(kind, outcome)


def outcome_of(error: BaseException) -> str:
    """The `outcome` label of an operation that ended with `error`: `aborted` for an operator's
    abort (asked for: a rate of `failed` must not rise with it), `cancelled`, else `failed`."""
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    return "aborted" if abort_in_words(error) is not None else "failed"


def workflow_phase_entered(phase: str) -> None:
    """A workflow entered `phase` (the Phase search attribute's value)."""
    if (meter := _workflow_meter()) is not None:
        meter.create_counter(PREFIX + "phase_entered", "phase changes").add(1, {"phase": phase})


def activity_power_cycle(result: R) -> R:
    """Count a finished power cycle by its method and BMC (a reboot loop shows per BMC, which is
    per host except on a BMC that serves several Systems); returns `result` so the call site
    stays one line."""
    if (meter := _activity_meter()) is not None:
        meter.create_counter(PREFIX + "power_cycles", "power cycles finished").add(
            1,
            {"method": result.method, "already_done": str(result.already_done).lower(), "bmc": result.bmc_id},
        )
    return result


def workflow_power_cycle(method: str, bmc: str, generation: int) -> None:
    """A power cycle a workflow made of its own steps (a reset's host ForceOff ... On around its
    DPU resets, `method` "ForceOff+On"), counted in the same series as `activity_power_cycle`'s:
    its `PowerCycleIssued` Event was told and no sample counted it (issue 38). Once per run and
    generation in this process (`contracts.counted_runs`), skipped on replay."""
    if (meter := _workflow_meter()) is not None and _first_time(f"power cycle {generation}"):
        meter.create_counter(PREFIX + "power_cycles", "power cycles finished").add(
            1, {"method": method, "already_done": "false", "bmc": bmc}
        )


def activity_bmc_request(bmc: str, status: int | str, seconds: float | None = None) -> None:
    """One request to a BMC: its HTTP status (or `timeout`, `unreachable`) and how long it took."""
    if (meter := _activity_meter()) is None:
        return
    status_class = f"{status // 100}xx" if isinstance(status, int) else status
    meter.create_counter(PREFIX + "bmc_requests", "requests to BMCs").add(
        1, {"bmc": bmc, "status": status_class}
    )
    if seconds is not None:
        meter.create_histogram_timedelta(
            PREFIX + "bmc_request_seconds", "BMC request latency", "duration"
        ).record(timedelta(seconds=seconds), {"bmc": bmc})


def activity_dpf_watch_reconnect() -> None:
    """The DPF watcher resumed a watch stream that the server ended or dropped."""
    if (meter := _activity_meter()) is not None:
        meter.create_counter(PREFIX + "dpf_watch_reconnects", "DPF watch reconnects").add(1)
