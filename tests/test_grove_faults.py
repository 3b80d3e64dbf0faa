"""Injected PodGang failures: never Available after (re)creation; falling back after Ready."""

from __future__ import annotations

import pytest
from test_grove_support import HASH, NS, available, condition, inference, running


async def test_a_podgang_injected_never_available_stays_scheduled_after_recreation() -> None:
    async with running(podgang_ready_seconds=0.05) as g:
        g.store.create(g.pcs_rt, NS, inference())
        await g.all_available(count=6)
        await g.controller.inject_never_available("inference-0-mpg-0")
        g.set_image("img:2")
        new_hash = await g.until(
            lambda: (
                g.pcs()["status"]["currentGenerationHash"]
                != g.gang("inference-0-mpg-0")["metadata"]["labels"][HASH]
                and g.pcs()["status"]["currentGenerationHash"]
            )
        )
        # Roll one unit of each replica at once; both are recreated in the same reconcile, so the
        # healthy one becoming Available means the injected one would have too.
        g.store.delete(g.pg_rt, NS, "inference-0-mpg-0")
        g.store.delete(g.pg_rt, NS, "inference-1-mpg-0")
        await g.until(lambda: g.rolled("inference-1-mpg-0", new_hash))
        stuck = g.gang("inference-0-mpg-0")
        assert stuck["metadata"]["labels"][HASH] == new_hash
        assert condition(stuck, "Scheduled")["status"] == "True"  # type: ignore[index]
        assert condition(stuck, "Available")["status"] == "False"  # type: ignore[index]
        assert stuck["status"]["phase"] == "Starting"

        def in_flight() -> str | None:
            annotations: dict[str, str] = g.pcs()["metadata"].get("annotations") or {}
            return annotations.get("grove.io/in-flight-podgangs")

        # The annotation follows in the PodCliqueSet's next reconcile, after the healthy gang became
        # Available (CI under load read it between the two): the healthy one leaves, the stuck one stays.
        await g.until(lambda: in_flight() == "inference-0-mpg-0", timeout=30)
        assert condition(g.gang("inference-0-mpg-0"), "Available")["status"] == "False"  # type: ignore[index]


async def test_an_available_podgang_falls_back_when_injected() -> None:
    async with running() as g:
        g.store.create(g.pcs_rt, NS, inference())
        await g.all_available(count=6)
        await g.controller.inject_fall_back("inference-1-mpg-1")
        gang = await g.until(lambda: not available(gang := g.gang("inference-1-mpg-1")) and gang)
        assert condition(gang, "Ready")["status"] == "False"  # type: ignore[index]
        assert condition(gang, "Available")["reason"] == "PodFailed"  # type: ignore[index]
        router = await g.until(
            lambda: (
                (r := g.store.get(g.pclq_rt, NS, "inference-1-router"))["status"]["readyReplicas"] == 1 and r
            )
        )
        assert condition(router, "MinAvailableBreached")["status"] == "False"  # type: ignore[index]
        # The replica still serves through its other MPG; the gang stays down until recreated.
        assert g.pcs()["status"]["availableReplicas"] == 2
        g.store.delete(g.pg_rt, NS, "inference-1-mpg-1")
        await g.until(lambda: available(g.find("inference-1-mpg-1")))
        assert g.violations.as_json() == []


async def test_fall_back_injected_before_available_happens_right_after_it() -> None:
    async with running(podgang_ready_seconds=0.05) as g:
        g.store.create(g.pcs_rt, NS, inference(replicas=1))
        await g.until(lambda: "inference-0-mpg-0" in g.gangs())
        await g.controller.inject_fall_back("inference-0-mpg-0")
        # PodFailed is only ever set on a gang that was Available (a pending gang is PodsNotReady).
        await g.until(
            lambda: (c := condition(g.gang("inference-0-mpg-0"), "Available")) and c["reason"] == "PodFailed"
        )
        assert g.gang("inference-0-mpg-0")["status"]["phase"] == "Starting"


async def test_injecting_into_an_unknown_podgang_is_a_key_error() -> None:
    async with running() as g:
        with pytest.raises(KeyError):
            await g.controller.inject_never_available("nope")
        with pytest.raises(KeyError):
            await g.controller.inject_fall_back("nope")
