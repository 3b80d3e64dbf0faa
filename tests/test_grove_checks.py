"""Each Grove invariant committed on purpose by a client, and seen recorded."""

from __future__ import annotations

from test_grove_support import HASH, NS, Grove, available, inference, running

from simulators.violations import (
    MULTIPLE_MINIMUM_VIABLE_PODGANGS_IN_FLIGHT,
    PODGANG_MIXED_TEMPLATE_HASHES,
    REPLICA_BELOW_MIN_AVAILABLE,
)


async def updated_template(g: Grove) -> str:
    old = g.pcs()["status"]["currentGenerationHash"]
    g.set_image("img:2")
    return await g.until(lambda: (h := g.pcs()["status"]["currentGenerationHash"]) != old and h)


async def test_rolling_a_podclique_instead_of_its_podgang_mixes_hashes() -> None:
    async with running() as g:
        g.store.create(g.pcs_rt, NS, inference())
        await g.all_available(count=6)
        await updated_template(g)
        g.store.delete(g.pclq_rt, NS, "inference-0-workers-0-prefill")
        await g.until(lambda: PODGANG_MIXED_TEMPLATE_HASHES in g.kinds())
        (v,) = [v for v in g.violations.as_json() if v["kind"] == PODGANG_MIXED_TEMPLATE_HASHES]
        assert v["subject"] == "default/inference-0-mpg-0"
        assert "inference-0-workers-0-prefill" in v["detail"]
        # Repaired the right way: rolling the whole gang.
        g.store.delete(g.pg_rt, NS, "inference-0-mpg-0")
        await g.until(lambda: available(g.find("inference-0-mpg-0")))
        assert g.kinds().count(PODGANG_MIXED_TEMPLATE_HASHES) == 1


async def test_editing_the_hash_label_of_a_podgang_mixes_hashes() -> None:
    async with running() as g:
        g.store.create(g.pcs_rt, NS, inference())
        await g.all_available(count=6)
        patch = {"metadata": {"labels": {HASH: "0123456789"}}}
        g.store.patch(g.pg_rt, NS, "inference-1-workers-2", patch, "merge")
        await g.until(lambda: PODGANG_MIXED_TEMPLATE_HASHES in g.kinds())
        assert g.violations.as_json()[0]["subject"] == "default/inference-1-workers-2"


async def test_two_mpgs_of_one_replica_in_flight_at_once() -> None:
    async with running(podgang_ready_seconds=0.05) as g:
        g.store.create(g.pcs_rt, NS, inference())
        await g.all_available(count=6)
        await updated_template(g)
        g.store.delete(g.pg_rt, NS, "inference-0-mpg-0")
        g.store.delete(g.pg_rt, NS, "inference-0-mpg-1")
        await g.until(lambda: MULTIPLE_MINIMUM_VIABLE_PODGANGS_IN_FLIGHT in g.kinds())
        flight = [
            v for v in g.violations.as_json() if v["kind"] == MULTIPLE_MINIMUM_VIABLE_PODGANGS_IN_FLIGHT
        ]
        assert flight[0]["subject"] == "default/inference-0"
        # Both MPGs down: the replica could have kept serving through one of them.
        assert REPLICA_BELOW_MIN_AVAILABLE in g.kinds()


async def test_removing_an_mpg_while_the_other_has_fallen_back_drops_the_replica() -> None:
    async with running(podgang_ready_seconds=0.05) as g:
        g.store.create(g.pcs_rt, NS, inference())
        await g.all_available(count=6)
        await updated_template(g)
        await g.controller.inject_fall_back("inference-1-mpg-1")
        await g.until(lambda: not available(g.gang("inference-1-mpg-1")))
        assert g.violations.as_json() == []  # a crash is not the client's doing
        # The client waited for its last roll, but not for the replica's other MPG.
        g.store.delete(g.pg_rt, NS, "inference-1-mpg-0")
        await g.until(lambda: REPLICA_BELOW_MIN_AVAILABLE in g.kinds())
        (v,) = g.violations.as_json()
        assert v["subject"] == "default/inference-1"
        assert MULTIPLE_MINIMUM_VIABLE_PODGANGS_IN_FLIGHT not in g.kinds()  # the fallen one is not in flight


async def test_single_mpg_replicas_may_be_rolled_one_replica_at_a_time_only() -> None:
    async with running(podgang_ready_seconds=0.05) as g:
        g.store.create(g.pcs_rt, NS, inference(router=1))
        await g.all_available(count=6)
        new_hash = await updated_template(g)
        # One replica down while the other serves: what a one-replica-at-a-time roll does.
        g.store.delete(g.pg_rt, NS, "inference-0-mpg-0")
        await g.until(lambda: g.rolled("inference-0-mpg-0", new_hash))
        assert g.violations.as_json() == []
        # Both replicas' only MPG at once: the whole PodCliqueSet stops serving.
        g.store.delete(g.pg_rt, NS, "inference-1-mpg-0")
        g.store.delete(g.pg_rt, NS, "inference-0-mpg-0")
        await g.until(lambda: REPLICA_BELOW_MIN_AVAILABLE in g.kinds())
        assert {v["subject"] for v in g.violations.as_json()} == {
            "default/inference-0",
            "default/inference-1",
        }


async def test_deleting_a_scaling_group_rolls_pieces_of_several_gangs() -> None:
    async with running() as g:
        g.store.create(g.pcs_rt, NS, inference())
        await g.all_available(count=6)
        await updated_template(g)
        g.store.delete(g.pcsg_rt, NS, "inference-1-workers")
        await g.until(lambda: g.kinds().count(PODGANG_MIXED_TEMPLATE_HASHES) >= 3)
        subjects = {
            v["subject"] for v in g.violations.as_json() if v["kind"] == PODGANG_MIXED_TEMPLATE_HASHES
        }
        assert subjects == {f"default/inference-1-{s}" for s in ("mpg-0", "mpg-1", "workers-2")}


async def test_rolling_a_tail_podgang_while_an_mpg_of_its_replica_is_in_flight() -> None:
    from simulators.violations import STEP_STARTED_BEFORE_PREVIOUS_AVAILABLE

    async with running(podgang_ready_seconds=0.05) as g:
        g.store.create(g.pcs_rt, NS, inference())
        await g.all_available(count=6)
        await updated_template(g)
        await g.controller.inject_never_available("inference-0-mpg-0")  # stays in flight
        g.store.delete(g.pg_rt, NS, "inference-0-mpg-0")
        await g.until(lambda: g.find("inference-0-mpg-0"))
        g.store.delete(g.pg_rt, NS, "inference-1-mpg-0")  # another replica: independent
        g.store.delete(g.pg_rt, NS, "inference-0-workers-2")
        await g.until(lambda: STEP_STARTED_BEFORE_PREVIOUS_AVAILABLE in g.kinds())
        (v,) = [v for v in g.violations.as_json() if v["kind"] == STEP_STARTED_BEFORE_PREVIOUS_AVAILABLE]
        assert v["subject"] == "default/inference-0-workers-2"
        assert "inference-0-mpg-0" in v["detail"]
