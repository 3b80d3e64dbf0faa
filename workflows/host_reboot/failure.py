"""What a BMC's failure to reboot a host is called, in words an operator can act on.

`HostRebootWorkflow` puts the reason in its Phase details (manual reboot wait) or, for a caller
that escalates on its own, in the failure `BMCRebootFailed`; a host operation quotes it in the
manual-intervention reason. The activity's error type decides the words: a BMC that rejects the
credentials is named as such (it will not pass by waiting), an unreachable one as unreachable
(the network or the BMC is down), and only a BMC that answered "busy" (409, 429, 5xx) as busy.

Cost: none beyond the string (pure function, no I/O).
"""

from __future__ import annotations

from temporalio.exceptions import ActivityError, ApplicationError, FailureError, TimeoutError

_UNREACHABLE_MARKS = ("cannot reach", "timed out")


def bmc_failure_reason(host_id: str, err: FailureError) -> str:
    """One line: what the BMC of `host_id` did, then the activity's own message."""
    cause = err.cause if isinstance(err, ActivityError) else err
    while isinstance(cause, TimeoutError) and cause.cause is not None:
        cause = cause.cause  # a start-to-close timeout: the last attempt's error says more
    if not isinstance(cause, ApplicationError):
        return f"the BMC of {host_id} could not reboot it ({cause or err})"
    kind, message = cause.type, cause.message
    if kind == "BMCAuthenticationFailed":
        what = "rejected the credentials"
    elif kind == "CredentialsUnavailable":
        what = "cannot be logged in to: its credentials cannot be read"
    elif kind == "BMCUnavailable" and any(mark in message for mark in _UNREACHABLE_MARKS):
        what = "is unreachable"
    elif kind == "BMCUnavailable":
        what = "stayed busy"
    elif kind == "ResetTypeNotSupported":
        what = "does not offer the reset needed"
    elif kind == "BMCRequestRejected":
        what = "rejected the request"
    elif kind == "PowerStateTimeout":
        what = "did not reach the power state in time"
    else:
        what = "could not reboot it"
    return f"the BMC of {host_id} {what} ({kind}: {message})"
