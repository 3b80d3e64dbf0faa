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
"""

from __future__ import annotations

from typing import ClassVar

from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import CompositePayloadConverter, DataConverter, EncodingPayloadConverter


class SharedPydanticPayloadConverter(PydanticPayloadConverter):
    """`PydanticPayloadConverter` whose instances share their component converters."""

    _components: ClassVar[tuple[EncodingPayloadConverter, ...]] = ()

    def __init__(self) -> None:  # nullary, as the SDK requires of a payload converter class
        if not SharedPydanticPayloadConverter._components:  # a race builds two: both are equal
            SharedPydanticPayloadConverter._components = tuple(PydanticPayloadConverter().converters.values())
        # The composite's own public constructor with the shared components (the pydantic one's
        # would build new ones).
        CompositePayloadConverter.__init__(self, *SharedPydanticPayloadConverter._components)


DATA_CONVERTER = DataConverter(payload_converter_class=SharedPydanticPayloadConverter)
"""Pass as `data_converter` to every `Client.connect` and `Replayer` (`metalflow.client` does)."""
