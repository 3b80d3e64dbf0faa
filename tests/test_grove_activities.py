"""The Grove activities against the simulated site over HTTP: reads, idempotent rolls pinned by
uid, template writes that refuse bad input and change nothing; and the pure patch helpers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rollout_support import INFERENCE, PLAIN, gangs, grove_site, pcs_object
from sim_support import RunningSim

from activities.grove import GroveActivities
from contracts.errors import InvalidInput
from contracts.models.grove import PCSRef, RollPodGangsInput, SetImagesInput, TemplateInput
from drivers.grove import images_patch, replacement
from drivers.kube import Kube
from drivers.settings import Settings

INFERENCE_REF = PCSRef(namespace="default", name="inference")
ROLLING = {**PLAIN, "name": "rolling", "update_strategy": "RollingRecreate"}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with grove_site(tmp_path_factory.mktemp("grove"), INFERENCE, ROLLING, timings="zero") as running:
        yield running


@pytest.fixture
def grove(sim: RunningSim) -> Iterator[GroveActivities]:
    kube = Kube(Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig))
    yield GroveActivities(kube)
    kube.close()


async def test_read_pcs_state_sees_the_plan_layout(grove: GroveActivities) -> None:
    state = await grove.read_pcs_state(INFERENCE_REF)
    assert state.exists and state.update_strategy == "OnDelete"
    assert state.observed_generation == state.generation and state.current_hash
    assert [g.name for g in state.gangs] == [
        "inference-0-mpg-0", "inference-0-mpg-1", "inference-0-workers-2",
        "inference-1-mpg-0", "inference-1-mpg-1", "inference-1-workers-2",
    ]  # fmt: skip
    assert all(g.hash == state.current_hash and g.available for g in state.gangs)
    assert state.images == {c: "registry.local/inference:1.0" for c in ("router", "prefill", "decode")}
    missing = await grove.read_pcs_state(PCSRef(namespace="default", name="nope"))
    assert not missing.exists


async def test_roll_deletes_a_stale_podgang_once_pinned_by_uid(
    grove: GroveActivities, sim: RunningSim
) -> None:
    template = await grove.read_pcs_template(INFERENCE_REF)
    written = await grove.set_pcs_images(
        SetImagesInput(pcs=INFERENCE_REF, images={"router": "registry.local/r:9"})
    )
    assert written.changed and written.generation == template.generation + 1
    again = await grove.set_pcs_images(
        SetImagesInput(pcs=INFERENCE_REF, images={"router": "registry.local/r:9"})
    )
    assert not again.changed and again.generation == written.generation
    target = await _observed_hash(grove, written.generation)
    old_uid = gangs(sim, "inference")["inference-1-mpg-0"]["metadata"]["uid"]
    request = RollPodGangsInput(pcs=INFERENCE_REF, podgangs=("inference-1-mpg-0",), target_hash=target)
    first = await grove.roll_podgangs(request)
    assert first.deleted == ("inference-1-mpg-0",)
    second = await grove.roll_podgangs(request)  # a retry: recreated (or being) at the target
    assert second.deleted == () and second.already_done == ("inference-1-mpg-0",)
    assert gangs(sim, "inference")["inference-1-mpg-0"]["metadata"]["uid"] != old_uid
    restored = await grove.restore_pcs_template(TemplateInput(pcs=INFERENCE_REF, template=template.template))
    assert restored.changed and restored.template == template.template
    assert sim.violations() == []


@pytest.mark.parametrize(
    ("ref", "images", "message"),
    [
        (
            INFERENCE_REF,
            {"gpu": "registry.local/g:1"},
            "has no clique gpu; its cliques: decode, prefill, router",
        ),
        (PCSRef(namespace="default", name="rolling"), {"frontend": "registry.local/f:2"}, "needs OnDelete"),
        (
            PCSRef(namespace="default", name="nope"),
            {"router": "registry.local/r:2"},
            "no PodCliqueSet default/nope",
        ),
    ],
)
async def test_bad_template_writes_are_refused_and_change_nothing(
    grove: GroveActivities, sim: RunningSim, ref: PCSRef, images: dict[str, str], message: str
) -> None:
    before = {n: pcs_object(sim, n)["metadata"]["resourceVersion"] for n in ("inference", "rolling")}
    with pytest.raises(InvalidInput, match=message):
        await grove.set_pcs_images(SetImagesInput(pcs=ref, images=images))
    assert {n: pcs_object(sim, n)["metadata"]["resourceVersion"] for n in ("inference", "rolling")} == before


def test_images_patch_changes_only_the_images() -> None:
    def clique(name: str, replicas: int) -> dict[str, Any]:
        pod = {"containers": [{"name": name, "image": f"x/{name}:1"}]}
        return {"name": name, "spec": {"replicas": replicas, "podSpec": pod}}

    pcs: dict[str, Any] = {
        "metadata": {"namespace": "default", "name": "p"},
        "spec": {
            "updateStrategy": {"type": "OnDelete"},
            "template": {"cliques": [clique("a", 2), clique("b", 1)]},
        },
    }
    assert images_patch(pcs, {"a": "x/a:1"}) is None
    patch = images_patch(pcs, {"a": "x/a:2"})
    assert patch is not None
    cliques = patch["spec"]["template"]["cliques"]
    assert cliques[0]["spec"] == {"replicas": 2, "podSpec": {"containers": [{"name": "a", "image": "x/a:2"}]}}
    assert cliques[1] == pcs["spec"]["template"]["cliques"][1]
    assert pcs["spec"]["template"]["cliques"][0]["spec"]["podSpec"]["containers"][0]["image"] == "x/a:1"
    with pytest.raises(InvalidInput, match="is not a container image reference"):
        images_patch(pcs, {"a": "X A"})


def test_replacement_nulls_what_the_new_value_lacks() -> None:
    assert replacement({"a": 1, "b": {"c": 1, "d": 2}}, {"b": {"c": 1}}) == {"a": None, "b": {"d": None}}
    assert replacement({"a": [1]}, {"a": [2]}) == {"a": [2]}


async def _observed_hash(grove: GroveActivities, generation: int) -> str:
    import asyncio

    for _ in range(200):
        state = await grove.read_pcs_state(INFERENCE_REF)
        if state.observed_generation >= generation:
            return state.current_hash
        await asyncio.sleep(0.05)
    raise AssertionError(f"generation {generation} not observed")
