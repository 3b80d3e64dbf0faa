"""The data converter every metalflow client and worker uses: the SDK's pydantic converter (JSON
of pydantic models, the same payloads byte for byte), built so the worker does not rebuild it on
every workflow activation.

Why: the SDK's workflow worker makes a new `DataConverter` for each activation (its
command-aware wrapper), and so a new payload converter from the class it is given. The SDK's
`PydanticPayloadConverter` then builds its converters afresh, the JSON one with an empty cache of
pydantic `TypeAdapter`s, so every activation also rebuilt the adapters of the types it decoded.
py-spy (GIL samples, 100-host fleet benchmark) put 5.6% of the worker's Python time in that
construction. `SharedPydanticPayloadConverter` is the same converter whose instances share one
process-wide set of component converters: construction is a dict of five, and each type's
adapter is built once per process.

Cost: one set of converters per process and its `TypeAdapter` cache (the SDK's bound, 1,000
types); nothing per host. The components hold no per-call state (the adapter cache is an
`lru_cache`, safe across the worker's threads).

Failures (`WordsOnlyFailureConverter`): an expected failure, one of metalflow's own errors raised
on purpose with its cause in words (`contracts.errors`: wrong BMC credentials, a missing secret,
a reboot the BMC refused), reaches Temporal with its type and words and no Python stack: the
SDK's converter put the traceback of the raise, and of each chained cause (the driver's
internals), in the failure the Temporal UI and `temporal workflow show` print (issue 38). Its
causes keep their words, without their stacks (one that crossed Temporal, an activity's or a
child's, was logged with its traceback where it was raised if it was not expected itself). Any
other exception keeps its stack trace: it is a bug to read.
"""

from __future__ import annotations

from typing import ClassVar

from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverter,
    EncodingPayloadConverter,
    PayloadConverter,
)
from temporalio.exceptions import ApplicationError

from contracts.errors import MetalflowError, taxonomy_types


class SharedPydanticPayloadConverter(PydanticPayloadConverter):
    """`PydanticPayloadConverter` whose instances share their component converters."""

    _components: ClassVar[tuple[EncodingPayloadConverter, ...]] = ()

    def __init__(self) -> None:  # nullary, as the SDK requires of a payload converter class
        if not SharedPydanticPayloadConverter._components:  # a race builds two: both are equal
            SharedPydanticPayloadConverter._components = tuple(PydanticPayloadConverter().converters.values())
        # The composite's own public constructor with the shared components (the pydantic one's
        # would build new ones).
        CompositePayloadConverter.__init__(self, *SharedPydanticPayloadConverter._components)


def expected_failure(exception: BaseException) -> bool:
    """One of metalflow's errors, raised on purpose with its words (or passed on by type, as an
    `ApplicationError` of a taxonomy type: an activity adding the step it reached)."""
    if isinstance(exception, MetalflowError):
        return True
    return isinstance(exception, ApplicationError) and exception.type in taxonomy_types()


def without_stacks(failure: Failure) -> None:
    """Clear the stack traces of `failure` and of every cause under it (their words stay)."""
    while True:
        failure.stack_trace = ""
        if not failure.HasField("cause"):
            return
        failure = failure.cause


class WordsOnlyFailureConverter(DefaultFailureConverter):
    """The SDK's failure converter, an expected failure's stacks left out (module docstring)."""

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        super().to_failure(exception, payload_converter, failure)
        if expected_failure(exception):
            without_stacks(failure)


DATA_CONVERTER = DataConverter(
    payload_converter_class=SharedPydanticPayloadConverter, failure_converter_class=WordsOnlyFailureConverter
)
"""Pass as `data_converter` to every `Client.connect` and `Replayer` (`metalflow.client` does)."""
