"""metalflow's data converter (contracts/converter.py): the SDK pydantic converter's payloads,
byte for byte, from converters built once per process rather than once per activation."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, pydantic_data_converter
from temporalio.converter import WorkflowSerializationContext

from contracts.converter import DATA_CONVERTER, SharedPydanticPayloadConverter
from contracts.models.host import HostRebootInput

VALUES: list[object] = [
    HostRebootInput(host_id="host-001", boot_generation=3, requested_by="ops", reason="why"),
    None,
    b"\x00raw",
    {"nested": [1, 2.5, "x"], "when": datetime(2026, 11, 23, 7, 0, tzinfo=UTC)},
]


def _json(converter: SharedPydanticPayloadConverter) -> PydanticJSONPlainPayloadConverter:
    found = converter.converters[b"json/plain"]
    assert isinstance(found, PydanticJSONPlainPayloadConverter)
    return found


def test_payloads_are_those_of_the_sdk_pydantic_converter() -> None:
    ours = DATA_CONVERTER.payload_converter.to_payloads(VALUES)
    sdk = pydantic_data_converter.payload_converter.to_payloads(VALUES)
    assert [p.SerializeToString(deterministic=True) for p in ours] == [
        p.SerializeToString(deterministic=True) for p in sdk
    ]
    back = DATA_CONVERTER.payload_converter.from_payloads(sdk, [HostRebootInput, type(None), bytes, dict])
    assert back[0] == VALUES[0] and back[1] is None and back[2] == VALUES[2]


def test_instances_share_their_converters_and_type_adapters() -> None:
    first, second = SharedPydanticPayloadConverter(), SharedPydanticPayloadConverter()
    assert first is not second and _json(first) is _json(second)
    first.from_payloads(first.to_payloads([VALUES[0]]), [HostRebootInput])
    hits = _json(second)._type_adapter.cache_info().hits  # the adapter cache the SDK keeps
    second.from_payloads(second.to_payloads([VALUES[0]]), [HostRebootInput])
    assert _json(second)._type_adapter.cache_info().hits > hits  # reused, not rebuilt


def test_a_bad_payload_still_fails_validation_naming_the_field() -> None:
    value = {"host_id": "host-001", "boot_generation": 0}
    bad = pydantic_data_converter.payload_converter.to_payloads([value])
    with pytest.raises(ValidationError, match="boot_generation"):
        DATA_CONVERTER.payload_converter.from_payloads(bad, [HostRebootInput])


def test_with_context_keeps_working() -> None:
    """The SDK makes a context-bound copy per workflow (its nullary constructor, then the
    converters): the copy converts like the original."""
    context = WorkflowSerializationContext(namespace="default", workflow_id="reboot/host-001")
    bound = DATA_CONVERTER.with_context(context)
    payloads = bound.payload_converter.to_payloads([VALUES[0]])
    assert bound.payload_converter.from_payloads(payloads, [HostRebootInput]) == [VALUES[0]]
