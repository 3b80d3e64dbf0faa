"""Every activity a workflow calls through `contracts.activity_api` has an implementation the
worker registers, under the same name, taking and returning the same models: a declaration that
drifted from its implementation would type-check in the workflow and fail at run time."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import pytest
from temporalio import activity

from activities.bmc_lease import BMCLeaseActivities
from activities.campaign import CampaignActivities
from activities.dpf import DPFActivities
from activities.grove import GroveActivities, RolloutWatcherActivities
from activities.inventory import InventoryActivities
from activities.pool import OwnerActivities, PoolActivities
from activities.redfish.dpu_reset import DPUResetActivities
from activities.redfish.firmware import FirmwareActivities
from activities.redfish.power import PowerActivities
from activities.redfish.waits import PowerWaitActivities
from activities.site_watch import SiteWatchActivities
from activities.versions import VersionActivities
from contracts import activity_api

IMPLEMENTATIONS = (
    BMCLeaseActivities,
    CampaignActivities,
    VersionActivities,
    DPFActivities,
    GroveActivities,
    RolloutWatcherActivities,
    InventoryActivities,
    OwnerActivities,
    PoolActivities,
    FirmwareActivities,
    PowerActivities,
    PowerWaitActivities,
    DPUResetActivities,
    SiteWatchActivities,
)


def _name(fn: Callable[..., Any]) -> str | None:
    definition = activity._Definition.from_callable(fn)
    return None if definition is None else definition.name


def _signature(fn: Callable[..., Any]) -> tuple[list[Any], Any]:
    hints = typing.get_type_hints(fn)
    params = [hints[p] for p in inspect.signature(fn).parameters if p != "self"]
    return params, hints.get("return")


def _implemented() -> dict[str, Callable[..., Any]]:
    found: dict[str, Callable[..., Any]] = {}
    for cls in IMPLEMENTATIONS:
        for _, method in inspect.getmembers(cls, inspect.isfunction):
            name = _name(method)
            if name is not None:
                found[name] = method
    return found


DECLARED = {
    name: fn
    for _, fn in inspect.getmembers(activity_api, inspect.iscoroutinefunction)
    if (name := _name(fn)) is not None
}


def test_the_declarations_cover_what_workflows_call() -> None:
    assert len(DECLARED) >= 26


def test_every_grove_activity_is_declared() -> None:
    # The rollout calls all of them, and workflows reach activities only through declarations.
    grove = {
        name
        for cls in (GroveActivities, RolloutWatcherActivities)
        for _, method in inspect.getmembers(cls, inspect.isfunction)
        if (name := _name(method)) is not None
    }
    assert grove and grove <= set(DECLARED), sorted(grove - set(DECLARED))


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_declaration_matches_its_implementation(name: str) -> None:
    implemented = _implemented()
    assert name in implemented, f"no activity class implements {name}"
    assert _signature(DECLARED[name]) == _signature(implemented[name])


async def test_a_declaration_is_not_an_implementation() -> None:
    with pytest.raises(NotImplementedError, match="declaration"):
        await activity_api.read_host_dpf_state(activity_api.HostRef(host_id="h1"))
