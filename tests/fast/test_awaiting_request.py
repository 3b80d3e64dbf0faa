"""What `host status` says the request awaiting approval acts on (`awaiting`): what `metalflow
approve` judges by the kept site check, as the request's own command did (issue 36)."""

from __future__ import annotations

from contracts.models.host import (
    OperationPolicy,
    OperationRecord,
    OperationRequest,
    PendingOperation,
    RebootMethod,
    ResetRequest,
    ResetTarget,
)
from metalflow.site_verdicts import RESET_ARM, RESET_FULL, RESET_HOST, capability_of
from workflows.host.awaiting import awaiting_request

RECORD = OperationRecord(
    operation="reset", workflow_id="reset/h/1", requested_by="a", outcome="awaiting-approval"
)


def held(request: OperationRequest | ResetRequest, operation: str = "reset") -> PendingOperation:
    return PendingOperation(record=RECORD.model_copy(update={"operation": operation}), request=request)


def test_a_reset_says_its_target_dpus_and_full() -> None:
    named = awaiting_request(held(ResetRequest(requested_by="a", image_uri="x", target=ResetTarget.DPU,
                                               dpu_ids=("h-dpu-1",), full=True)))  # fmt: skip
    assert named is not None and named.dpu_ids == ("h-dpu-1",) and named.full
    assert capability_of(named.operation, full=named.full) == RESET_FULL
    every = awaiting_request(held(ResetRequest(requested_by="a", image_uri="x", target=ResetTarget.ALL_DPUS)))
    assert every is not None and every.dpu_ids is None and capability_of(every.operation) == RESET_ARM
    host = awaiting_request(held(ResetRequest(requested_by="a", image_uri="x", target=ResetTarget.HOST)))
    assert host is not None and capability_of(host.operation, host_only=host.target == "host") == RESET_HOST


def test_a_manual_reboot_is_said_and_an_approved_request_awaits_nothing() -> None:
    manual = OperationRequest(requested_by="a", policy=OperationPolicy(reboot_method=RebootMethod.MANUAL))
    said = awaiting_request(held(manual, "reboot"))
    assert said is not None and said.manual_reboot and said.operation == "reboot" and said.dpu_ids is None
    approved = held(manual, "reboot").model_copy(update={"approved": True})
    assert awaiting_request(approved) is None and awaiting_request(None) is None
