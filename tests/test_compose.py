"""docker-compose.temporal.yml: no Docker engine runs here, so check its shape statically."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts import names

COMPOSE = Path(__file__).resolve().parent.parent / "docker-compose.temporal.yml"


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    result: dict[str, Any] = document["services"]
    return result


def _depends(service: dict[str, Any]) -> dict[str, str]:
    return {name: spec["condition"] for name, spec in service.get("depends_on", {}).items()}


def test_services_start_in_dependency_order(services: dict[str, Any]) -> None:
    assert set(services) == {"postgresql", "temporal-schema", "temporal", "temporal-setup", "temporal-ui"}
    assert "healthcheck" in services["postgresql"]
    assert _depends(services["temporal-schema"]) == {"postgresql": "service_healthy"}
    assert _depends(services["temporal"]) == {"temporal-schema": "service_completed_successfully"}
    assert _depends(services["temporal-setup"]) == {"temporal": "service_started"}
    assert _depends(services["temporal-ui"]) == {"temporal-setup": "service_completed_successfully"}
    for one_shot in ("temporal-schema", "temporal-setup"):
        assert services[one_shot]["restart"] == "no"


def test_published_ports_are_loopback_only(services: dict[str, Any]) -> None:
    published = {name: service.get("ports", []) for name, service in services.items()}
    assert published["temporal"] == ["127.0.0.1:7233:7233"]
    assert published["temporal-ui"] == ["127.0.0.1:8080:8080"]
    for ports in published.values():
        for port in ports:
            assert str(port).startswith("127.0.0.1:"), port


def test_images_are_pinned(services: dict[str, Any]) -> None:
    for name, service in services.items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and re.fullmatch(r"\d+\.\d+(\.\d+)?([-.\w]*)", tag), (
            f"{name}: {image} is not pinned"
        )
    assert services["temporal"]["image"].startswith("temporalio/server:")
    assert services["temporal-ui"]["image"].startswith("temporalio/ui:")
    assert services["temporal-schema"]["image"].startswith("temporalio/admin-tools:")


def test_search_attributes_match_metalflow(services: dict[str, Any]) -> None:
    declared = services["temporal-setup"]["environment"]["METALFLOW_SEARCH_ATTRIBUTES"].split()
    assert dict(pair.split("=", 1) for pair in declared) == names.search_attribute_types()
    assert len(declared) == len(names.SEARCH_ATTRIBUTES)
