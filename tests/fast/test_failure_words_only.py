"""Issue 38: the Temporal UI's failure of an expected, classified error (the BMC rejected the
credentials) carried the Python traceback of the raise and of its chained driver error. Through
`contracts.converter.DATA_CONVERTER` (every client and worker of the product) such a failure
keeps its type and words and no stack, its causes included; any other error keeps its stack."""

from __future__ import annotations

from temporalio.api.failure.v1 import Failure
from temporalio.exceptions import ApplicationError

from contracts.converter import DATA_CONVERTER
from contracts.errors import BMCAuthenticationFailed, BMCRebootFailed

WORDS = "BMC host-002: POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset answered 401"


def _failure(raise_it: object) -> Failure:
    try:
        raise_it()  # type: ignore[operator]
    except BaseException as err:  # noqa: BLE001 - the raised error is what is converted
        failure = Failure()
        DATA_CONVERTER.failure_converter.to_failure(err, DATA_CONVERTER.payload_converter, failure)
        return failure
    raise AssertionError("nothing raised")


def _stacks(failure: Failure) -> str:
    """Every stack trace in the failure and its causes (what the UI would print)."""
    found = failure.stack_trace
    while failure.HasField("cause"):
        failure = failure.cause
        found += failure.stack_trace
    return found


def _driver_401() -> None:
    raise KeyError("the HTTP library's own error")


def _rejected() -> None:
    try:
        _driver_401()
    except KeyError as err:
        raise BMCAuthenticationFailed(WORDS) from err


def _reboot_failed() -> None:
    try:
        _rejected()
    except BMCAuthenticationFailed as err:
        raise BMCRebootFailed("the BMC of host-002 rejected the credentials") from err


def test_an_expected_failure_has_its_words_and_no_stack() -> None:
    failure = _failure(_rejected)
    assert failure.message == WORDS and failure.application_failure_info.type == "BMCAuthenticationFailed"
    assert failure.application_failure_info.non_retryable
    assert _stacks(failure) == "", failure
    assert "own error" in failure.cause.message  # the cause's words stay


def test_a_chain_of_expected_failures_has_no_stack_anywhere() -> None:
    failure = _failure(_reboot_failed)
    assert failure.application_failure_info.type == "BMCRebootFailed"
    assert failure.cause.application_failure_info.type == "BMCAuthenticationFailed"
    assert _stacks(failure) == "", failure


def test_the_same_type_passed_on_as_a_plain_application_error_is_expected_too() -> None:
    def passed_on() -> None:
        raise ApplicationError(WORDS, type="BMCAuthenticationFailed", non_retryable=True)

    assert _stacks(_failure(passed_on)) == ""


def test_any_other_error_keeps_its_stack() -> None:
    def bug() -> None:
        raise RuntimeError("a bug")

    def other() -> None:
        raise ApplicationError("not ours", type="Other")

    assert 'File "' in _failure(bug).stack_trace
    assert 'File "' in _failure(other).stack_trace
