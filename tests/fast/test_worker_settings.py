"""The worker's settings from its environment: each a clear error naming the variable when bad."""

from __future__ import annotations

import pytest

from drivers.settings import Settings


def test_the_takeover_time_is_read_from_the_environment_with_the_sdk_default() -> None:
    assert Settings.from_env({}).worker_takeover_seconds == 10.0  # the SDK's own default
    assert Settings.from_env({"METALFLOW_WORKER_TAKEOVER_SECONDS": "3"}).worker_takeover_seconds == 3.0


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("soon", "METALFLOW_WORKER_TAKEOVER_SECONDS must be a number, not 'soon'"),
        ("0.5", "worker_takeover_seconds"),  # below a second: the server's own floor
        ("601", "worker_takeover_seconds"),
    ],
)
def test_a_bad_takeover_time_names_the_variable(raw: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Settings.from_env({"METALFLOW_WORKER_TAKEOVER_SECONDS": raw})


def test_a_bad_lease_reclaim_time_still_names_its_variable() -> None:
    with pytest.raises(ValueError, match="METALFLOW_BMC_LEASE_RECLAIM_SECONDS must be a number, not 'x'"):
        Settings.from_env({"METALFLOW_BMC_LEASE_RECLAIM_SECONDS": "x"})
