"""The words an operator reads when a BMC cannot reboot a host (workflows/host_reboot/failure.py): a
refused login, an unreachable BMC and a busy one are three different problems, named apart."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError

from contracts.errors import BMCAuthenticationFailed, BMCUnavailable, CredentialsUnavailable
from workflows.host_reboot.failure import bmc_failure_reason


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (BMCAuthenticationFailed("BMC h1: POST /x answered 401"), "rejected the credentials"),
        (BMCUnavailable("BMC h1: cannot reach http://10.0.0.9 (ConnectError: refused)"), "is unreachable"),
        (BMCUnavailable("BMC h1: GET /redfish/v1 timed out"), "is unreachable"),
        (BMCUnavailable("BMC h1: POST /x answered 503 busy"), "stayed busy"),
        (
            CredentialsUnavailable("env BMC_PASSWORD is not set"),
            "cannot be logged in to: its credentials cannot be read",
        ),
    ],
)
def test_each_bmc_failure_is_named_for_what_it_is(error: ApplicationError, words: str) -> None:
    reason = bmc_failure_reason("h1", error)
    assert reason.startswith(f"the BMC of h1 {words} (")
    assert type(error).__name__ in reason
