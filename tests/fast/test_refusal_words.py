"""A refusal reads as what the workflow said, without a Python error's name (issue 38: `pause
refused: ValueError: already paused by alice`); the product's own error types, which name the
cause, stay."""

from __future__ import annotations

from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from metalflow.rollouts import root_cause


def test_a_validator_s_refusal_reads_without_the_python_error_name() -> None:
    refused = WorkflowUpdateFailedError(ApplicationError("already paused by alice", type="ValueError"))
    assert root_cause(refused) == "already paused by alice"


def test_the_product_s_own_error_type_stays() -> None:
    failed = WorkflowUpdateFailedError(ApplicationError("3 hosts failed", type="CampaignFailed"))
    assert root_cause(failed) == "CampaignFailed: 3 hosts failed"
