"""End to end: the operator's answers and the faults a rollout must survive, against the simulated
site's Grove (pinned 6eaa77f0): a pod Grove replaces while the rollout is paused and after an
abort (the pod-replacement fault), a template edit by someone else, a stuck step interrupted by
a rollback, a PodCliqueSet switched off OnDelete."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from host_operation_support import save_history
from rollout_support import (
    INFERENCE,
    delete_pod,
    gangs,
    grove_site,
    pcs_object,
    pod_hashes,
    pods,
    start_rollout,
    status_of,
    wait_for,
    wait_serving,
    worker_for,
)
from sim_support import RunningSim
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import ActivityEnvironment

from activities.grove.operations import GroveActivities
from contracts import names
from contracts.models.control import (
    ABORT_UPDATE,
    PAUSE_UPDATE,
    RESUME_UPDATE,
    OperatorAnswer,
    OperatorRequest,
)
from contracts.models.grove import ROLLBACK_UPDATE, PCSRef, RollGangInput
from contracts.with_start import execute_update
from drivers.kube import Kube
from drivers.settings import Settings

KUBECTL = "/usr/bin/kubectl"
NEW = {"prefill": "registry.local/worker:2.0", "decode": "registry.local/worker:2.0"}
OPERATOR = OperatorRequest(requested_by="pytest", reason="test")
# Pods Ready 0.2 s after they are bound, not the demo profile's 1 s, for the tests that never
# act between two steps of a running rollout (they pause it first, or hold it on a stuck step):
# what they assert does not depend on how long a step takes, only their wait does. The tests that
# act mid-rollout (after a step, before the next) keep 1 s: the room they act in.
QUICK_PODS = {"podgang_ready_seconds": 0.2}


async def answer(handle: WorkflowHandle[Any, Any], update: str) -> OperatorAnswer:
    result: OperatorAnswer = await execute_update(handle, update, OPERATOR, result_type=OperatorAnswer)
    return result


def kubectl_patch(sim: RunningSim, kind: str, name: str, patch_type: str, patch: str) -> None:
    """Someone else's write, by the real client: `kubectl patch` in namespace default."""
    subprocess.run(
        [KUBECTL, "--kubeconfig", str(sim.kubeconfig), "-n", "default", "patch", kind, name,
         f"--type={patch_type}", "-p", patch],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip


def gang_of(sim: RunningSim, replica: int, role: str) -> str:
    return next(
        n
        for n, g in sorted(gangs(sim, "inference").items())
        if g["metadata"]["labels"]["grove.io/podcliqueset-replica-index"] == str(replica)
        and g["metadata"]["labels"]["grove.io/podgang-role"] == role
    )


def pod_in(sim: RunningSim, gang: str, clique: str) -> str:
    return next(
        n for n, p in sorted(pods(sim, "inference", f"grove.io/podgang={gang}").items()) if f"-{clique}-" in n
    )


def images(sim: RunningSim) -> dict[str, str]:
    return {
        c["name"]: c["spec"]["podSpec"]["containers"][0]["image"]
        for c in pcs_object(sim, "inference")["spec"]["template"]["cliques"]
    }


async def hold_a_tail_in_flight(
    sim: RunningSim, handle: WorkflowHandle[Any, Any], original: dict[str, str]
) -> str:
    """Until a step is done and replica 0's next PodGang, a tail held by the `never-available`
    fault (injected by `hold_tails`), is in flight with its stale pods already removed. A
    template edit made now lands while the rollout waits on that step, never between its
    planning and its deletions: `roll_podgang` checks the generation last, but one round trip
    (its read, then the delete) no client can close, as Kubernetes has no precondition across
    two objects, and an edit landing in it would be the edit's doing (GREP-393 order, recorded by
    the simulator), not what these tests look at."""
    held = await wait_for(handle, lambda s: s.steps_done >= 1 and bool(s.in_flight), "a tail in flight")
    [tail] = held.in_flight
    assert tail in tails_of(sim, 0), held

    def removed() -> bool:
        return all(
            p["metadata"]["labels"]["grove.io/pod-template-hash"] != original.get(n.split("-")[-2])
            and not p["metadata"].get("deletionTimestamp")
            for n, p in pods(sim, "inference", f"grove.io/podgang={tail}").items()
        )

    deadline = time.monotonic() + 60
    while not await asyncio.to_thread(removed):
        assert time.monotonic() < deadline, f"the stale pods of {tail} not removed in 60 s"
        await asyncio.sleep(0.1)
    return tail


def tails_of(sim: RunningSim, replica: int) -> list[str]:
    return [
        n
        for n, g in sorted(gangs(sim, "inference").items())
        if g["metadata"]["labels"]["grove.io/podcliqueset-replica-index"] == str(replica)
        and g["metadata"]["labels"]["grove.io/podgang-role"] == "Tail"
    ]


def hold_tails(sim: RunningSim) -> tuple[list[str], dict[str, str]]:
    """Replica 0's tails never become available until `release`: the step on one stays in flight.
    Also the hash each clique's pods run before the rollout."""
    held = tails_of(sim, 0)
    for tail in held:
        sim.inject(f"podgangs/{tail}/never-available")
    original = {}
    for clique, hashes in clique_hashes(sim).items():
        [original[clique]] = hashes
    return held, original


def release(sim: RunningSim, held: list[str]) -> None:
    for tail in held:
        sim.inject(f"podgangs/{tail}/clear")


async def test_abort_takes_every_podgang_back_so_a_replaced_pod_joins_its_own_version(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        old = pod_hashes(sim, "inference", "decode")
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW)
            await wait_for(handle, lambda s: s.steps_done >= 2, "two steps done")
            await answer(handle, ABORT_UPDATE)
            # An abort is asked for: the run completes `aborted` (not Failed in Temporal's UI nor
            # in an alert on failed workflows), its result saying who, why and what is left.
            result = await handle.result()
            await save_history(handle, "rollout_aborted")
            assert result.outcome == "aborted" and "aborted by" in result.aborted, result
            assert "back at" in result.aborted
            assert (await handle.describe()).status.name == "COMPLETED"
            assert (await status_of(handle)).phase == "aborted"
        assert pod_hashes(sim, "inference", "decode") == old  # everything at the previous version
        assert images(sim)["decode"] == "registry.local/inference:1.0"
        # The pod-replacement fault after the abort: a pod of every PodGang replaced by Grove.
        for gang in gangs(sim, "inference"):
            delete_pod(sim, pod_in(sim, gang, "decode"))
            await asyncio.to_thread(wait_serving, sim, "inference")
        assert sim.violations() == [], "an aborted rollout left a PodGang a replaced pod could mix"


async def test_a_pod_replaced_while_paused_is_healed_at_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """While paused, two versions coexist (replica 0 new, replica 1 old) under one template, so a
    pod Grove replaces in an old PodGang comes back new: no client can prevent that mix (the
    simulator records it: honest). The rollout heals it at once: the PodGang is made whole at the
    template's version while still paused, and nothing else is recorded."""
    with grove_site(tmp_path, INFERENCE, timing=QUICK_PODS) as sim:
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW)
            await answer(handle, PAUSE_UPDATE)
            await wait_for(handle, lambda s: s.phase == "paused", "paused")
            stale_gang = gang_of(sim, 1, "Anchor")
            delete_pod(sim, pod_in(sim, stale_gang, "decode"))
            healed = await wait_for(
                handle, lambda s: s.repairs >= 1 and s.phase == "paused", "a repair, paused"
            )
            assert healed.steps_done < 6  # healing is not rolling on
            await asyncio.to_thread(wait_serving, sim, "inference")
            decode = {
                p["metadata"]["labels"]["grove.io/pod-template-hash"]
                for p in pods(sim, "inference", f"grove.io/podgang={stale_gang}").values()
                if "-decode-" in p["metadata"]["name"]
            }
            assert len(decode) == 1  # whole again
            await answer(handle, RESUME_UPDATE)
            result = await handle.result()
            await save_history(handle, "rollout_paused_healed")
        assert result.outcome == "completed"
        kinds = [(v["kind"], v["subject"]) for v in sim.violations()]
        assert kinds == [("podgang-mixed-template-hashes", f"default/{stale_gang}")]  # Grove's, healed


async def test_a_foreign_template_edit_pauses_naming_the_field_and_who_and_rollback_reverts_only_ours(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE) as sim:
        held, original = hold_tails(sim)
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW)
            await hold_a_tail_in_flight(sim, handle, original)
            patch = '[{"op":"add","path":"/spec/template/cliques/1/labels","value":{"team":"kv"}}]'
            kubectl_patch(sim, "pcs", "inference", "json", patch)
            paused = await wait_for(handle, lambda s: s.phase == "paused", "paused by the edit")
            assert paused.paused_reason is not None
            assert "spec.template.cliques[prefill].labels" in paused.paused_reason
            assert "kubectl-patch" in paused.paused_reason
            release(sim, held)
            started = time.monotonic()
            await answer(handle, ROLLBACK_UPDATE)
            result = await handle.result()
            assert time.monotonic() - started < 60
            await save_history(handle, "rollout_foreign_edit_rolled_back")
        assert result.outcome == "rolled-back"
        template = {c["name"]: c for c in pcs_object(sim, "inference")["spec"]["template"]["cliques"]}
        assert template["prefill"]["labels"] == {"team": "kv"}  # theirs stays
        assert images(sim)["decode"] == images(sim)["prefill"] == "registry.local/inference:1.0"  # ours went
        assert sim.violations() == [], "\n".join(
            [str(v) for v in sim.violations()]
            + [f"{x.kind} {x.podgangs} {x.deleted} {x.started_at} {x.finished_at}" for x in result.steps]
        )


async def test_rollback_interrupts_a_stuck_step_at_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with grove_site(tmp_path, INFERENCE, timing=QUICK_PODS) as sim:
        anchor = gang_of(sim, 0, "Anchor")
        sim.inject(f"podgangs/{anchor}/never-available")
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW)  # default 600 s deadline
            await wait_for(handle, lambda s: anchor in s.in_flight, "the anchor in flight")
            await asyncio.sleep(1)
            sim.inject(f"podgangs/{anchor}/clear")
            started = time.monotonic()
            await answer(handle, ROLLBACK_UPDATE)
            await wait_for(handle, lambda s: s.rolling_back, "rolling back", timeout=10)
            result = await handle.result()
            took = time.monotonic() - started
        assert result.outcome == "rolled-back" and took < 30, took
        assert sim.violations() == []


def set_strategy(sim: RunningSim, strategy: str) -> None:
    patch = '{"spec":{"updateStrategy":{"type":"' + strategy + '"}}}'
    kubectl_patch(sim, "pcs", "inference", "merge", patch)


async def test_a_switch_off_on_delete_pauses_saying_two_versions_who_and_what_to_do(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Issue 36, item 9. Switched to RollingRecreate mid-rollout, Grove rolls none of the rest
    (BEHAVIOUR.md U6): the rollout never claims a hand-over. It stops driving and pauses, saying
    the PodCliqueSet is on two versions (how many PodGangs at each), who switched it and what to
    do; `resume` is refused until it is OnDelete again, and then the rollout completes."""
    with grove_site(tmp_path, INFERENCE) as sim:
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW)
            await wait_for(handle, lambda s: s.steps_done >= 1, "a step done")
            set_strategy(sim, "RollingRecreate")
            paused = await wait_for(
                handle,
                lambda s: s.phase == "paused" and "left OnDelete" in (s.paused_reason or ""),
                "paused off OnDelete",
            )
            reason = paused.paused_reason or ""
            assert paused.phase == "paused" and paused.doing == "paused", paused
            assert "updateStrategy RollingRecreate, set by kubectl-patch (Update at" in reason, reason
            assert "stays on two versions: " in reason and " at the version before" in reason, reason
            assert "`metalflow rollout resume default/inference`" in reason, reason
            assert (await handle.describe()).typed_search_attributes.get(names.PHASE) == "paused"
            await asyncio.sleep(1)  # nobody rolls the rest: neither Grove nor the rollout
            assert len(pod_hashes(sim, "inference", "decode")) == 2
            assert (await status_of(handle)).steps_done == paused.steps_done
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await answer(handle, RESUME_UPDATE)
            assert "switch it back to OnDelete first" in str(refused.value.cause)
            set_strategy(sim, "OnDelete")
            for _ in range(50):  # accepted once the watcher has shown the switch back
                try:
                    await answer(handle, RESUME_UPDATE)
                    break
                except WorkflowUpdateFailedError as refused_again:
                    assert "switch it back to OnDelete first" in str(refused_again.cause)
                    await asyncio.sleep(0.2)
            else:
                pytest.fail("`resume` still refused 10 s after the switch back to OnDelete")
            result = await handle.result()
        assert result.outcome == "completed"
        assert len(pod_hashes(sim, "inference", "decode")) == 1
        assert sim.violations() == []
        (gated,) = result.warnings  # issue 36, item 10 (BEHAVIOUR.md G5)
        assert (
            "a scale-out of the scaling groups of default/inference stays gated in replica(s) 0, 1" in gated
        )


async def test_an_abort_off_on_delete_ends_taking_nothing_back_and_says_where_the_podgangs_are(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Issue 36, item 9: off OnDelete a take-back would be a template write Grove rolls itself,
    so an abort ends the rollout at once, writing nothing, and says what it leaves."""
    with grove_site(tmp_path, INFERENCE) as sim:
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW)
            await wait_for(handle, lambda s: s.steps_done >= 1, "a step done")
            set_strategy(sim, "RollingRecreate")
            await wait_for(
                handle, lambda s: "left OnDelete" in (s.paused_reason or ""), "paused off OnDelete"
            )
            accepted = await answer(handle, ABORT_UPDATE)
            assert "so the rollout ends taking nothing back" in accepted.message, accepted.message
            result = await handle.result()  # an abort is asked for: the run completes `aborted`
            assert result.outcome == "aborted", result
            said = result.aborted
            assert "nothing was taken back" in said and " at the version before" in said, said
            assert (await status_of(handle)).phase == "aborted"
        assert images(sim)["decode"] == NEW["decode"]  # no restore was written
        assert len(pod_hashes(sim, "inference", "decode")) == 2  # left on two versions, as it says


async def test_rollout_status_reports_the_pods_a_gated_scale_out_holds(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Issue 36, item 10: scaled out after the rollout wrote the template, a scaling group's new
    replica stays gated (BEHAVIOUR.md G5); the status's warning counts its pods."""
    with grove_site(tmp_path, INFERENCE, timing=QUICK_PODS) as sim:
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW)
            await answer(handle, PAUSE_UPDATE)  # paused once the template is written
            await wait_for(handle, lambda s: s.phase == "paused", "paused")
            kubectl_patch(sim, "pcsg", "inference-0-workers", "merge", '{"spec":{"replicas":4}}')
            status = await wait_for(
                handle, lambda s: any("gated by it now" in w for w in s.warnings), "the gated pods counted"
            )
            (warning,) = status.warnings
            assert (
                "stays gated in replica(s) 0, 1 (2 pods of ScaleOut PodGangs are gated by it now)" in warning
            )
            await handle.terminate("test over")


def clique_hashes(sim: RunningSim) -> dict[str, set[str]]:
    """clique -> the pod-template hashes its pods run."""
    return {c: pod_hashes(sim, "inference", c) for c in ("router", "prefill", "decode")}


async def test_a_rollback_after_a_foreign_edit_puts_every_pod_back_and_leaves_the_edit_dormant(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Issue 35, item 6. Mid-rollout someone labels prefill (a clique the rollout changes, a field
    it did not set) and sets decode's image (a field it set); the operator answers `rollback`.
    Under OnDelete that edit alone would roll nothing. After the rollback every pod runs what
    ran before the rollout (its recorded original), the fields the rollout set hold their
    recorded values, and the label stays in the template, dormant: no pod runs it. The status
    announces the version the rollback ends at."""
    with grove_site(tmp_path, INFERENCE) as sim:
        before = clique_hashes(sim)
        assert all(len(h) == 1 for h in before.values())
        held, original = hold_tails(sim)
        async with worker_for(client, task_queue, sim):
            handle = await start_rollout(client, task_queue, "inference", NEW)
            await hold_a_tail_in_flight(sim, handle, original)
            edit = (
                '[{"op":"add","path":"/spec/template/cliques/1/labels","value":{"team":"kv"}},'
                '{"op":"replace","path":"/spec/template/cliques/2/spec/podSpec/containers/0/image",'
                '"value":"registry.local/worker:3.0"}]'
            )
            kubectl_patch(sim, "pcs", "inference", "json", edit)
            paused = await wait_for(handle, lambda s: s.phase == "paused", "paused by the edit")
            previous = paused.previous_hash
            release(sim, held)
            await answer(handle, ROLLBACK_UPDATE)
            announced = await wait_for(handle, lambda s: s.rolling_back, "rolling back", timeout=30)
            result = await asyncio.wait_for(handle.result(), 120)
            final = await status_of(handle)
        after = clique_hashes(sim)
        template = {c["name"]: c for c in pcs_object(sim, "inference")["spec"]["template"]["cliques"]}
        assert result.outcome == "rolled-back"
        assert after == before, f"pods after the rollback {after}, before the rollout {before}"
        assert images(sim)["decode"] == images(sim)["prefill"] == "registry.local/inference:1.0"
        assert template["prefill"].get("labels") == {"team": "kv"}, "the foreign label was not left dormant"
        assert announced.target_hash == final.target_hash == result.target_hash == previous, (
            f"announced {announced.target_hash}, ended at {result.target_hash}, previous {previous}"
        )
        assert sim.violations() == [], "\n".join(str(v) for v in sim.violations())


async def test_a_step_planned_before_a_template_edit_deletes_nothing(tmp_path: Path) -> None:
    """`roll_podgang` reads the PodCliqueSet's generation last, after the pods: a step planned at
    one generation deletes nothing once someone else's edit moved it (the rollout sees the edit
    at its next safe point). At the generation it was planned for, the same call deletes."""
    with grove_site(tmp_path, INFERENCE) as sim:
        grove = GroveActivities(Kube(Settings(site_file=sim.site_file, kubeconfig=sim.kubeconfig)))
        ref = PCSRef(namespace="default", name="inference")
        [tail, *_] = tails_of(sim, 0)
        before = set(pods(sim, "inference", f"grove.io/podgang={tail}"))
        planned = int(pcs_object(sim, "inference")["metadata"]["generation"])
        step = RollGangInput(
            pcs=ref, podgang=tail, targets={"prefill": "next", "decode": "next"}, generation=planned
        )
        label = '[{"op":"add","path":"/spec/template/cliques/1/labels","value":{"team":"kv"}}]'
        kubectl_patch(sim, "pcs", "inference", "json", label)
        stale = await ActivityEnvironment().run(grove.roll_podgang, step)
        assert stale.deleted == () and stale.blocked_by == ("default/inference (generation changed)",), stale
        assert set(pods(sim, "inference", f"grove.io/podgang={tail}")) == before
        moved = step.model_copy(update={"generation": planned + 1})
        current = await ActivityEnvironment().run(grove.roll_podgang, moved)
        assert set(current.deleted) == before, current
