"""contracts.names: the business-key workflow ids and the search attribute declarations."""

from __future__ import annotations

import pytest

from contracts import names


def test_workflow_ids_are_business_keys() -> None:
    assert names.reprovision_workflow_id("h001") == "reprovision/h001"
    assert names.host_operation_workflow_id("firmware", "h-17") == "firmware/h-17"
    assert names.rollout_workflow_id("inference", "llama-70b") == "rollout/inference/llama-70b"
    assert names.campaign_workflow_id("bfb-2024.10") == "campaign/bfb-2024.10"


def test_same_business_key_gives_same_id() -> None:
    # The id is the lock: two requests for one host must collide.
    assert names.reprovision_workflow_id("h001") == names.reprovision_workflow_id("h001")
    assert names.reprovision_workflow_id("h001") != names.reprovision_workflow_id("h002")


@pytest.mark.parametrize("bad", ["", "a/b", "host 1", "-leading", "é", "x\n"])
def test_id_parts_that_would_need_quoting_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid host id"):
        names.reprovision_workflow_id(bad)


def test_search_attributes_are_metalflows_keywords_and_one_time() -> None:
    assert names.search_attribute_types() == {
        "HostId": "Keyword",
        "Operation": "Keyword",
        "Phase": "Keyword",
        "Campaign": "Keyword",
        "Site": "Keyword",
        "PoolState": "Keyword",
        "Instance": "Keyword",
        "PhaseSince": "Datetime",
        "BfbVersion": "KeywordList",
        "Maintenance": "Keyword",
        "MaintenanceSince": "Datetime",
        "LeftOffBy": "Keyword",
    }
    assert [key.name for key in names.SEARCH_ATTRIBUTES] == list(names.search_attribute_types())


def test_host_workflow_ids_are_business_keys() -> None:
    assert names.host_workflow_id("gpu-0042") == "host/gpu-0042"
    assert names.monitor_workflow_id("gpu-0042") == "monitor/host-gpu-0042"
    assert names.host_reboot_workflow_id("gpu-0042", 3) == "reboot/gpu-0042/generation-3"
    with pytest.raises(ValueError, match="generations start at 1"):
        names.host_reboot_workflow_id("gpu-0042", 0)
    with pytest.raises(ValueError, match="invalid host id"):
        names.host_workflow_id("gpu 42")
