"""The errors activities raise and workflows match: one module, one small taxonomy.

A contract of both layers (ARCHITECTURE.md): activities raise these, workflows read
`PERMANENT_TYPES` to keep their retry policies from retrying them, and neither layer imports the
other for it. Every error an activity raises on purpose is one of these. Each is an `ApplicationError` whose
`type` is the class name, so workflows and tests match on `err.type` (or on the class, in
activity tests) and the Temporal UI shows a name that says what went wrong.

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
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from temporalio.exceptions import ApplicationError


class MetalflowError(ApplicationError):
    """Base of the taxonomy; subclasses set `permanent`."""

    permanent: ClassVar[bool] = False

    def __init__(self, message: str, *details: Any, next_retry_delay: timedelta | None = None) -> None:
        super().__init__(
            message,
            *details,
            type=type(self).__name__,
            non_retryable=self.permanent,
            next_retry_delay=next_retry_delay,
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


class ProgressNotRecorded(TransientError):
    """An activity could not see its heartbeat details recorded by Temporal before a step that
    must not be repeated; it did not take the step (the next attempt resumes)."""


PERMANENT_TYPES: frozenset[str] = frozenset(cls.__name__ for cls in PermanentError.__subclasses__())
"""The `type` names workflows must not retry on their own."""
