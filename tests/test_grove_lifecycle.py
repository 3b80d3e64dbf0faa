"""Grove behaviour through the store: creation, OnDelete rolled by a client, RollingRecreate."""

from __future__ import annotations

from typing import Any

from test_grove_support import HASH, NS, Grove, available, condition, inference, running

from simulators.grove.model import generation_hash

PCLQS = ["router"] + [f"workers-{j}-{c}" for j in range(3) for c in ("prefill", "decode")]
GANGS = ["mpg-0", "mpg-1", "workers-2"]


async def test_a_new_podcliqueset_is_realised_and_becomes_available() -> None:
    async with running() as g:
        g.store.create(g.pcs_rt, NS, inference())
        await g.all_available(count=6)
        pcs = await g.until(lambda: (p := g.pcs()).get("status", {}).get("availableReplicas") == 2 and p)
        hash_ = pcs["status"]["currentGenerationHash"]
        assert pcs["status"]["replicas"] == 2
        assert pcs["status"]["updatedReplicas"] == 2
        assert "updateProgress" not in pcs["status"]  # no update happened
        pclqs = {o["metadata"]["name"] for o in g.store.list(g.pclq_rt, NS)[0]}
        assert pclqs == {f"inference-{r}-{p}" for r in (0, 1) for p in PCLQS}
        pcsgs = {o["metadata"]["name"]: o for o in g.store.list(g.pcsg_rt, NS)[0]}
        assert set(pcsgs) == {"inference-0-workers", "inference-1-workers"}
        assert pcsgs["inference-0-workers"]["status"]["availableReplicas"] == 3
        gangs = g.gangs()
        assert set(gangs) == {f"inference-{r}-{s}" for r in (0, 1) for s in GANGS}
        mpg = gangs["inference-1-mpg-0"]
        assert mpg["metadata"]["labels"][HASH] == hash_
        assert mpg["metadata"]["labels"]["grove.io/podcliqueset-replica-index"] == "1"
        assert mpg["metadata"]["labels"]["grove.io/minimum-viable-unit"] == "true"
        assert mpg["status"]["phase"] == "Running"
        for type_ in ("Scheduled", "Ready", "Available"):
            assert condition(mpg, type_)["status"] == "True"  # type: ignore[index]
        groups = {pg["name"]: pg for pg in mpg["spec"]["podgroups"]}
        assert groups["inference-1-router"]["podReferences"] == [
            {"namespace": NS, "name": f"inference-1-router-{hash_}-0"}
        ]
        tail = gangs["inference-1-workers-2"]
        assert tail["metadata"]["labels"]["grove.io/base-podgang"] == "inference-1-mpg-0"
        router = g.store.get(g.pclq_rt, NS, "inference-0-router")
        assert router["status"]["readyReplicas"] == 2
        assert condition(router, "MinAvailableBreached")["status"] == "False"  # type: ignore[index]
        assert g.violations.as_json() == []


def uids(g: Grove) -> dict[str, str]:
    return {n: o["metadata"]["uid"] for n, o in g.gangs().items()}


async def roll_one(g: Grove, name: str, new_hash: str) -> list[str]:
    """What metalflow's rollout does for one unit: delete the PodGang, wait until the recreated
    one carries the new hash and reports Available=True. Returns the in-flight annotations the
    PodCliqueSet carried meanwhile, read from the store's recorded events (not from polling, which
    can miss a short in-flight window on a loaded machine)."""
    since = g.store.resource_version
    g.store.delete(g.pg_rt, NS, name)

    def rolled() -> dict[str, Any] | None:
        gang = g.gangs().get(name)
        return gang if gang and gang["metadata"]["labels"][HASH] == new_hash and available(gang) else None

    await g.until(rolled)
    pcs_key = (g.pcs_rt.group, g.pcs_rt.plural)
    return [
        note
        for _, _, new, rv, key in g.store._history
        if rv > since and key == pcs_key and new is not None
        if (note := (new["metadata"].get("annotations") or {}).get("grove.io/in-flight-podgangs"))
    ]


async def test_on_delete_rolls_nothing_until_a_client_deletes_one_podgang_at_a_time() -> None:
    async with running(podgang_ready_seconds=0.05) as g:
        g.store.create(g.pcs_rt, NS, inference("OnDelete"))
        await g.all_available(count=6)
        old_hash = g.pcs()["status"]["currentGenerationHash"]
        before = uids(g)

        g.set_image("img:2")
        pcs = await g.until(lambda: (p := g.pcs())["status"]["currentGenerationHash"] != old_hash and p)
        new_hash = pcs["status"]["currentGenerationHash"]
        assert pcs["status"]["updatedReplicas"] == 0
        assert "updateStartedAt" in pcs["status"]["updateProgress"]
        assert "updateEndedAt" not in pcs["status"]["updateProgress"]
        assert uids(g) == before  # OnDelete: the controller rolled nothing by itself
        assert {o["metadata"]["labels"][HASH] for o in g.gangs().values()} == {old_hash}

        seen = await roll_one(g, "inference-0-mpg-0", new_hash)
        assert "inference-0-mpg-0" in seen  # published while in flight
        gang = g.gang("inference-0-mpg-0")
        assert gang["metadata"]["uid"] != before["inference-0-mpg-0"]
        assert all(
            ref["name"].split("-")[-2] == new_hash
            for pg in gang["spec"]["podgroups"]
            for ref in pg["podReferences"]
        )
        prefill = g.store.get(g.pclq_rt, NS, "inference-0-workers-0-prefill")
        assert prefill["metadata"]["labels"][HASH] == new_hash
        assert prefill["spec"]["podSpec"]["containers"][0]["image"] == "img:2"
        # The other units of the replica are untouched.
        assert g.gang("inference-0-mpg-1")["metadata"]["uid"] == before["inference-0-mpg-1"]

        for name in [
            "inference-0-mpg-1",
            "inference-0-workers-2",
            "inference-1-mpg-0",
            "inference-1-mpg-1",
            "inference-1-workers-2",
        ]:
            await roll_one(g, name, new_hash)
        pcs = await g.until(lambda: "updateEndedAt" in (p := g.pcs())["status"]["updateProgress"] and p)
        assert pcs["status"]["updatedReplicas"] == 2
        assert pcs["status"]["availableReplicas"] == 2
        assert pcs["status"]["updateProgress"]["updatedPodCliquesCount"] == 14
        assert "currentlyUpdating" not in pcs["status"]["updateProgress"]  # CRD: not set for OnDelete
        assert "grove.io/in-flight-podgangs" not in (pcs["metadata"].get("annotations") or {})
        assert g.violations.as_json() == []


async def test_rolling_recreate_rolls_every_replica_by_itself() -> None:
    async with running(podgang_ready_seconds=0.02) as g:
        g.store.create(g.pcs_rt, NS, inference("RollingRecreate"))
        await g.all_available(count=6)
        old_hash = g.pcs()["status"]["currentGenerationHash"]
        before = uids(g)
        g.set_image("img:2")

        def finished() -> dict[str, Any] | None:
            pcs = g.pcs()
            progress = pcs["status"].get("updateProgress") or {}
            return pcs if "updateEndedAt" in progress and pcs["status"]["updatedReplicas"] == 2 else None

        pcs = await g.until(finished, timeout=10)
        new_hash = pcs["status"]["currentGenerationHash"]
        assert new_hash != old_hash
        gangs = g.gangs()
        assert {o["metadata"]["labels"][HASH] for o in gangs.values()} == {new_hash}
        assert all(gangs[n]["metadata"]["uid"] != uid for n, uid in before.items())
        progress = pcs["status"]["updateProgress"]
        assert [e["replicaIndex"] for e in progress["currentlyUpdating"]] == [0, 1]
        assert all("updateEndedAt" in e for e in progress["currentlyUpdating"])
        # It rolled one MPG at a time and kept every replica available.
        assert g.violations.as_json() == []


async def test_scale_out_and_in_of_the_podcliqueset() -> None:
    async with running() as g:
        g.store.create(g.pcs_rt, NS, inference(replicas=1))
        await g.all_available(count=3)
        g.store.patch(g.pcs_rt, NS, "inference", {"spec": {"replicas": 3}}, "merge")
        await g.all_available(count=9)
        await g.until(lambda: g.pcs()["status"]["availableReplicas"] == 3)
        g.store.patch(g.pcs_rt, NS, "inference", {"spec": {"replicas": 1}}, "merge")
        await g.until(lambda: len(g.gangs()) == 3 and g.pcs()["status"]["replicas"] == 1)
        assert {o["metadata"]["name"] for o in g.store.list(g.pcsg_rt, NS)[0]} == {"inference-0-workers"}
        assert g.violations.as_json() == []


async def test_a_new_update_during_a_rolling_recreate_does_not_leave_it_stuck() -> None:
    async with running(podgang_ready_seconds=0.02) as g:
        g.store.create(g.pcs_rt, NS, inference("RollingRecreate"))
        await g.all_available(count=6)
        g.set_image("img:2")
        await g.until(lambda: any(g.controller.in_flight))  # the first roll is under way
        g.set_image("img:3")
        last = generation_hash(g.pcs())
        await g.until(lambda: g.pcs()["status"]["currentGenerationHash"] == last)

        def finished() -> bool:
            pcs = g.pcs()
            return (
                pcs["status"]["updatedReplicas"] == 2 and "updateEndedAt" in pcs["status"]["updateProgress"]
            )

        await g.until(finished, timeout=10)
        assert {o["metadata"]["labels"][HASH] for o in g.gangs().values()} == {last}
        images = {o["spec"]["podSpec"]["containers"][0]["image"] for o in g.store.list(g.pclq_rt, NS)[0]}
        assert images == {"img:3"}


async def test_the_site_workloads_are_created_by_initialise_and_deleting_the_pcs_removes_all() -> None:
    from simulators.site import default_site

    async with running() as g:
        await g.controller.initialise(default_site(0, 0).workloads)
        await g.all_available(count=6)
        pcs = g.pcs()
        assert pcs["spec"]["updateStrategy"]["type"] == "OnDelete"
        await g.until(lambda: g.pcs()["status"]["availableReplicas"] == 2)
        g.store.delete(g.pcs_rt, NS, "inference")
        await g.until(lambda: not g.gangs() and not g.store.list(g.pclq_rt, NS)[0])
        assert g.store.list(g.pcsg_rt, NS)[0] == []
        assert g.controller.in_flight == set()
