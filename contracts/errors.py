"""Every error metalflow raises on purpose, one class each: one module, one small taxonomy.

A contract of every floor (docs/ARCHITECTURE.md sections 1 and 4): drivers and activities raise
the I/O errors, workflows raise the workflow errors, workflows read `PERMANENT_TYPES` to keep their retry
policies from retrying them, and clients (activities, the CLI, tests) match what they receive
with `matches(err, Type)`. Each is an `ApplicationError` whose `type` is the class name, so the
Temporal UI shows a name that says what went wrong, and a failure that crossed Temporal (which
keeps the type name, not the class) is matched by name.

Permanent errors (`non_retryable`): retrying cannot help; the input, the credentials or the
world must change first.

- `InvalidInput`: the request itself is wrong (unknown host, malformed value).
- `ObjectNotFound`: a Kubernetes object that must exist does not.
- `DPUFailed`: a DPU is in phase `Error`; the message carries DPF's condition message.
- `CredentialsUnavailable`: a credential reference cannot be resolved (unset variable,
  unreadable file, missing Secret or key). The message names the reference, never a value.
- `BMCAuthenticationFailed`: the BMC answered 401 or 403.
- `BMCRequestRejected`: the BMC answered 400, 404 or 405, or with something that is not
  Redfish (malformed JSON, a missing `PowerState`).
- `ResetTypeNotSupported`: the BMC does not advertise a reset type the operation needs.
- `KubernetesAccessDenied`: the API server answered 401 or 403 (credentials or RBAC).

Transient errors (retried by the activity's retry policy):

- `BMCUnavailable`: 409, 5xx, a timeout or a refused connection; `next_retry_delay` carries the
  BMC's `Retry-After` when it sent one.
- `PowerStateTimeout`: the BMC accepted a reset but `PowerState` did not reach the target
  before the deadline.
- `KubernetesUnavailable`: the API server answered 5xx or could not be reached, or a watch
  could not be kept.
- `ConflictRetriesExhausted`: an edit kept meeting 409 Conflicts after re-reading.

Expected ends (BENIGN: logged quietly, not as failures): `WorkerStopping` (retried: a long
watch hands over at a graceful worker shutdown), `WatcherStopped` (its workflow has ended).

Workflow errors (`WorkflowError`: a run ends with one; never retried):

- `OperationAborted`: an operator's `abort` stops the run. It is raised inside the run (its waits
  and calls, `workflows/kernel.py`); a host operation's run then completes, its result's
  `aborted` saying who and why (`kernel.Runbook.aborted_result`); a run of older code failed
  with it, its details carrying `{"boot_generation": n}` when the host had been power-cycled.
- `HostBusy`, `InstanceConflict`, `NothingAwaitsApproval`, `OperationStarted`, `DPUsRemoved`,
  `ReasonNoLongerHolds`, `InMaintenance`, `AutomationHeldBack`: the host entity refused a request
  (another operation runs; the instance does not allow it; nothing to approve; `withdraw` came
  after the start; a reprovision of DPUs DPF no longer has; an approval of the monitor's
  reprovision whose DPUs are Ready again; the host is in maintenance; an operator aborted an
  automation's request).
- `OperationInstalling`: a host operation refused a campaign's abort (`finish_installing`): its
  DPUs install and will ask for a reboot only it gives; it finishes its reboot round.
- `BMCRebootFailed`: the BMC could not reboot the host (the reboot's caller escalates);
  `RebootFailed`: the reboot child ended otherwise.
- `WatcherFailed`: the DPF watch of a host could not be kept.
- `PhaseTimeout`, `RemovalTimedOut`: a wait on the world passed its deadline.
- `FirmwareStageFailed`, `FirmwareNotActivated`: a firmware run could not stage, or the power
  cycle did not activate the image; `DPUsNotInDPF`: a firmware run's DPUs DPF has no object of
  (never provisioned, or removed) would never be Ready after its power cycle: ended unrebooted.
- `RolloutAborted`, `PodCliqueSetGone`: a rollout was aborted, or its PodCliqueSet deleted.
- `RebootLoop`: DPF asks for more host reboots in one sequence than the policy allows
  (`rebootSequenceCount`, docs/DOMAIN.md section 2.5); the message names the DPU and the count.
- `DPUResetNotEffective`: a DPU reset was accepted but the DPU did not restart or come back to
  its OS in time (the message says what its BMC showed).
- `HostLeftOff`: a run was cancelled and could not power back on the host it had turned off
  (a cancel asks nobody): it ends failed with these words, not cancelled, because Temporal's
  cancellation carries none and whoever follows the run (the host's entity: `host status`,
  `host list`) must read that the host is OFF.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from temporalio.exceptions import ActivityError, ApplicationError, ApplicationErrorCategory, FailureError


class MetalflowError(ApplicationError):
    """Base of the taxonomy; subclasses set `permanent` (and `category` for an expected end)."""

    permanent: ClassVar[bool] = False
    category_of: ClassVar[ApplicationErrorCategory] = ApplicationErrorCategory.UNSPECIFIED

    def __init__(self, message: str, *details: Any, next_retry_delay: timedelta | None = None) -> None:
        super().__init__(
            message,
            *details,
            type=type(self).__name__,
            non_retryable=self.permanent,
            next_retry_delay=next_retry_delay,
            category=self.category_of,
        )


class PermanentError(MetalflowError):
    permanent = True


class TransientError(MetalflowError):
    permanent = False


class InvalidInput(PermanentError):
    pass


class ObjectNotFound(PermanentError):
    pass


class DPUFailed(PermanentError):
    pass


class CredentialsUnavailable(PermanentError):
    pass


class BMCAuthenticationFailed(PermanentError):
    pass


class BMCRequestRejected(PermanentError):
    pass


class PowerContested(PermanentError):
    """Another actor keeps undoing our power action (the host found On again after each ForceOff
    the BMC accepted): not sent again; a person decides."""


class ResetTypeNotSupported(PermanentError):
    pass


class KubernetesAccessDenied(PermanentError):
    pass


class BMCUnavailable(TransientError):
    pass


class PowerStateTimeout(TransientError):
    pass


class KubernetesUnavailable(TransientError):
    pass


class ConflictRetriesExhausted(TransientError):
    pass


class WorkerStopping(TransientError):
    """A long watch activity ends because its worker begins a graceful shutdown: the next attempt
    resumes at once elsewhere from its checkpoint. BENIGN: logged at DEBUG, not as a failure."""

    category_of = ApplicationErrorCategory.BENIGN


class WatcherStopped(PermanentError):
    """A watch activity ends because its workflow has ended. BENIGN: an expected end."""

    category_of = ApplicationErrorCategory.BENIGN


class ProgressNotRecorded(TransientError):
    """An activity could not see its heartbeat details recorded by Temporal before a step that
    must not be repeated; it did not take the step (the next attempt resumes)."""


class PreviousRebootRunning(TransientError):
    """A host's reboot waits, before touching a BMC that serves this host only, for the host's
    previous reboot to end (one that is being stopped): retried until it has (`lease_host_bmc`)."""


class WorkflowError(PermanentError):
    """A workflow's own failure: the run ends with it (never retried)."""


class OperationAborted(WorkflowError):
    pass


class HostBusy(WorkflowError):
    pass


class InstanceConflict(WorkflowError):
    pass


class NothingAwaitsApproval(WorkflowError):
    pass


class DPUsRemoved(WorkflowError):
    """The host entity refused a reprovision of DPUs its removal took out of DPF."""


class InMaintenance(WorkflowError):
    """The host entity refused a disruptive request: the host is in maintenance (`metalflow host
    maintenance`), and the request did not say `in_maintenance` (the monitor's and a campaign's
    never do)."""


class AutomationHeldBack(WorkflowError):
    """The host entity refused an automatic request (the monitor's, a campaign's): an operator
    aborted an automation's request for this host, and automation is held back until an operator
    says otherwise (`metalflow host retry HOST`, or an operator's own request)."""


class OperationStarted(WorkflowError):
    pass


class ReasonNoLongerHolds(WorkflowError):
    """The host entity refused an `approve`: the request's reason (the monitor's: its DPUs
    degraded) no longer holds as DPF says now; the request was withdrawn, nothing started."""


class OperationInstalling(WorkflowError):
    pass


class BMCRebootFailed(WorkflowError):
    pass


class RebootFailed(WorkflowError):
    pass


class HostLeftOff(WorkflowError):
    pass


class WatcherFailed(WorkflowError):
    pass


class PhaseTimeout(WorkflowError):
    pass


class RemovalTimedOut(WorkflowError):
    pass


class FirmwareStageFailed(WorkflowError):
    pass


class FirmwareNotActivated(WorkflowError):
    pass


class DPUsNotInDPF(WorkflowError):
    """A firmware run's DPUs DPF has no object of: after the power cycle they would never be
    Ready, so it ends before rebooting (workflows/firmware/state.py)."""


class RolloutAborted(WorkflowError):
    pass


class PodCliqueSetGone(WorkflowError):
    pass


class RebootLoop(WorkflowError):
    pass


class DPUResetNotEffective(WorkflowError):
    pass


def _subclasses(cls: type[MetalflowError]) -> list[type[MetalflowError]]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


PERMANENT_TYPES: frozenset[str] = frozenset(
    c.__name__
    for c in _subclasses(PermanentError)
    if not issubclass(c, WorkflowError) and c.category_of == ApplicationErrorCategory.UNSPECIFIED
)
"""The `type` names of the permanent errors activities raise: workflows must not retry them (the
workflow errors and the BENIGN ends are non-retryable by their own flag)."""


def taxonomy_types() -> frozenset[str]:
    """The `type` name of every error here (every `MetalflowError` subclass): a failure of one
    of them was raised on purpose, with its cause in words."""
    return frozenset(c.__name__ for c in _subclasses(MetalflowError))


def matches(err: BaseException | None, *types: type[MetalflowError]) -> bool:
    """Whether `err` is one of `types`, by class or, once it crossed Temporal, by type name.

    Looks at `err` itself and, for a failure that wraps one (an `ActivityError`, a
    `ChildWorkflowError`, an update's or a workflow's failure), at its cause."""
    wanted = {t.__name__ for t in types}
    current: BaseException | None = err
    while current is not None:
        if isinstance(current, ApplicationError):
            return current.type in wanted
        current = current.cause if isinstance(current, FailureError) else None
    return False


def first_application_error(err: BaseException | None) -> ApplicationError | None:
    """The first `ApplicationError` of a failure chain (`err` itself, or the cause of an
    `ActivityError`, a `ChildWorkflowError`, a workflow's or an update's failure), or None: the
    error the run's own code or its activity raised, as `matches` reads it."""
    current: BaseException | None = err
    while current is not None:
        if isinstance(current, ApplicationError):
            return current
        current = _cause_of(current)
    return None


def activity_answer_details(err: BaseException) -> tuple[Any, ...] | None:
    """The details of the error an activity itself raised, when `err` is its `ActivityError`
    with that error as its cause; None when the activity did not answer (a timeout, a cancel),
    or `err` is the run's own (an abort, a cancel of the run while the activity ran)."""
    if not isinstance(err, ActivityError) or not isinstance(err.cause, ApplicationError):
        return None
    return tuple(err.cause.details)


def abort_in_words(err: BaseException | None) -> str | None:
    """The operator's abort that ended a run, from "aborted by" ("aborted by alice: wrong host;
    ..."), when the run's own error is its abort error (`OperationAborted`, `RolloutAborted`);
    None for any other end.
    An abort is asked for: callers say it as such, never as a failure."""
    found = first_application_error(err)
    if found is None or found.type not in (OperationAborted.__name__, RolloutAborted.__name__):
        return None
    return abort_words(found.message)


def abort_words(message: str) -> str:
    """An abort's message from "aborted by" (a rollout's reads "rollout of ns/x aborted by ...":
    its id says which already)."""
    return message[message.index("aborted by") :] if "aborted by" in message else f"aborted: {message}"


def cause_in_words(err: BaseException) -> str:
    """What ended a failed call or run, in words: the type and message of the error its code
    raised (the first `ApplicationError` of the chain, e.g. "BMCCredentialsRejected: the BMC of
    host-002-dpu-0 rejected the credentials"), not Temporal's wrapping ("Activity task failed",
    "Child Workflow execution failed"). A chain without one (a timeout, a termination) is said by
    its innermost error: "<type>: <message>"."""
    found = first_application_error(err)
    if found is not None:
        return f"{found.type}: {found.message}" if found.type else found.message
    innermost = err
    while (inner := _cause_of(innermost)) is not None:
        innermost = inner
    said = str(innermost)
    return f"{type(innermost).__name__}: {said}" if said else type(innermost).__name__


def _cause_of(err: BaseException) -> BaseException | None:
    """What a Temporal failure wraps: a `FailureError`'s cause, or a client's
    `WorkflowFailureError`'s (not a `FailureError`, but it has one)."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) else None
