"""Operator control, one vocabulary for every workflow: who asks and why, what was done, and the
names of the messages every long-running workflow answers.

Every workflow an operator can steer (host operations, reboots, monitors, rollouts, campaigns)
takes the same `OperatorRequest` for `abort`, `pause`, `resume`, `retry`, `approve`, ... and
answers an `OperatorAnswer`; a workflow adds fields only where its message needs more (a
campaign's `abort` may also abort the running hosts: `AbortRequest`). The kernel of workflow
mechanics (`workflows/kernel.py`) records these requests and applies the validators' rules.

Cost: none (models and names).
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict

from contracts.validation import Reason, Requester

STATUS_QUERY: Final = "status"
"""Every metalflow workflow answers it with its own status model."""
ABORT_UPDATE: Final = "abort"
PAUSE_UPDATE: Final = "pause"
RESUME_UPDATE: Final = "resume"
RETRY_UPDATE: Final = "retry"


class OperatorRequest(BaseModel):
    """Who asks, and why: the payload of every operator update and of `host_rebooted`."""

    # Unknown fields are ignored, never refused: a newer worker may add one to a payload that an
    # older worker reads back from history (docs/VERSIONING.md section 6).
    model_config = ConfigDict(frozen=True)

    requested_by: Requester
    reason: Reason = ""


class OperatorAnswer(BaseModel):
    """What an operator update did, in words the CLI prints."""

    model_config = ConfigDict(frozen=True)

    accepted: bool
    message: str
