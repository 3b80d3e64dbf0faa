"""`metalflow site check` against the simulated site's variants (issue 36, deliver 3 and 4).

One simulated site (DPF 25.10) whose hosts each play one variant: host BMC profiles with and
without PowerCycle and without UpdateService (`basic-only`, simulators/redfish/BEHAVIOUR.md H6),
a BF4 DPU, and, for the second check, the faults `wrong-credentials` (F1), `unreachable` (F3) and
the DPU BMC's `no-powercycle` (B13). Two small sites more play DPF 26 and 26.4-rc.3.

Each test checks its rows of README's "variant x capability" table (`row`): the table is what
these tests see. The check reads only: every BMC's request log holds GETs and its session's
login and logout, and the cluster's audit no write. An operation whose capability the kept
findings block is refused before anything is sent (no Temporal is reached: `--address` points
at nothing), naming the finding and `metalflow site check`; so are `rollout start` and a BFB
campaign's `campaign start` on the site's own blocked findings, and no workflow is started.

Grove's scheduling (issue 36 point 11, grove BEHAVIOUR.md K1-K5): two small sites more play KAI
with stale-gang eviction on in a cluster migrated to PodGangMap, and Grove's default-scheduler
backend; `rollout start` and `rollout plan` say the kept verdict for their PodCliqueSet without a
request to the cluster.

DPF's trust (issue 36 point 7, dpf BEHAVIOUR.md Z1): two initialised DPF 26 sites more, one whose
zero-trust onboarding left DPF holding the DPU BMC credentials, one host trusted.

Cost: seven simulators (one of five hosts, six of one), nineteen `metalflow` commands (in the
tests' command servers: no interpreter start each), the session's Temporal dev server.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_in_command_server
from events_support import emitting_worker, events_v1
from host_operation_support import worker_for
from sim_support import RunningSim, running_sim, sim_http
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from contracts import names
from contracts.models.grove import RolloutResult
from metalflow.site_check import load_findings, save_findings
from metalflow.site_verdicts import (
    CAPABILITIES,
    DPFFinding,
    GroveFinding,
    SiteFindings,
    host_verdict,
    verdicts,
)

ROOT = Path(__file__).resolve().parents[1]
# host id -> (variant as README's table names it, host BMC profile, DPU model)
HOSTS = {
    "sc-001": ("DPF 25.10, host BMC `powercycle`, BF3", "powercycle", "BF3"),
    "sc-002": ("host BMC `no-powercycle` (P1)", "no-powercycle", "BF3"),
    "sc-003": ("host BMC `basic-only`: no UpdateService (H6)", "basic-only", "BF3"),
    "sc-004": ("BF4 DPU", "powercycle", "BF4"),
    "sc-005": ("", "powercycle", "BF3"),  # as sc-001: a DPU BMC fault of its own in the second check
}
FAULTED = {
    "sc-001": "host BMC `wrong-credentials` (F1)",
    "sc-005": "DPU BMC `unreachable` (F3)",
    "sc-004": "DPU BMC `no-powercycle` (B13)",
}
WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def site_file(directory: Path, hosts: dict[str, tuple[str, str, str]]) -> Path:
    from simulators.site import BMC, DPU, Host, ScalingGroup, Site, Workload, dump_site

    workload = Workload(
        name="inference",
        replicas=1,
        cliques=["router"],
        scaling_groups=[ScalingGroup(name="workers", cliques=["decode"], replicas=1, min_available=1)],
        update_strategy="OnDelete",
    )
    site = Site(
        name="site-check",
        workloads=[workload],
        hosts=[
            Host(id=host, bmc=BMC(profile=profile), dpus=[DPU(id=f"{host}-dpu-0", model=model)])
            for host, (_, profile, model) in hosts.items()
        ],
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "site-in.yaml"
    path.write_text(dump_site(site))
    return path


async def metalflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`metalflow ARGS` with exactly `env`, in a command server (tests/cli_support.py): what the
    command does and says, without an interpreter's start per command (the subject here is the
    check and the refusals, not the console script, which tests/test_cli_exit_codes.py runs)."""
    code, out, err = await run_in_command_server(list(args), env)
    return subprocess.CompletedProcess(["metalflow", *args], code, out, err)


async def check(sim: RunningSim, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "METALFLOW_", "KUBECONFIG"))}
    env["METALFLOW_STATE_DIR"] = str(sim.state_dir)  # the site file and kubeconfig the simulator wrote
    return await metalflow(env, *args)


def row(variant: str, statuses: dict[str, str]) -> str:
    """One line of README's table."""
    return "| " + " | ".join([variant, *(statuses[c] for c in CAPABILITIES)]) + " |"


def readme_rows() -> set[str]:
    return {line.strip() for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| ")}


def host_row(sim: RunningSim, host: str, variant: str) -> str:
    findings = load_findings(sim.state_dir / "site-check.json")
    assert findings is not None
    return row(variant, {c: host_verdict(findings, host, c).status for c in CAPABILITIES})


def no_writes(sim: RunningSim, audit_before: list[dict[str, Any]]) -> None:
    """Every BMC answered only GETs and its session's login/logout; the API recorded no write."""
    for host in sim.site["hosts"]:
        for bmc_id in (host["id"], *(d["id"] for d in host["dpus"])):
            for request in sim.bmc_requests(bmc_id):
                method, path = request.split(" ", 1)
                assert method == "GET" or path.startswith("/redfish/v1/SessionService/Sessions"), (
                    bmc_id,
                    request,
                )
    new = [a for a in sim.audit() if a not in audit_before]
    assert not [a for a in new if a["verb"] in WRITES], new


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    directory = tmp_path_factory.mktemp("site-check")
    with running_sim(directory / "sim", site_file=site_file(directory / "in", HOSTS)) as running:
        yield running


async def test_a_clean_site_is_ready_or_degraded_per_variant_read_only(sim: RunningSim) -> None:
    audit_before = sim.audit()
    result = await check(sim, "site", "check", "--json")
    assert result.returncode == 0, result.stderr  # nothing blocked
    document = json.loads(result.stdout)
    assert document["site"] == "site-check" and document["checked_at"].endswith("Z")
    assert "DPF 25.10: no agentStatus, no rebootStatus (dpf O2)" in document["info"]
    bmcs = {b["bmc_id"]: b for b in document["findings"]["bmcs"]}
    assert not bmcs["sc-003"]["update_service"] and bmcs["sc-001"]["update_service"]
    assert "PowerCycle" not in bmcs["sc-002"]["reset_types"] and bmcs["sc-001"]["last_reset_time"]
    assert bmcs["sc-004-dpu-0"]["boot_progress"] and "PowerCycle" in bmcs["sc-004-dpu-0"]["reset_types"]
    reboot = next(v for v in document["verdicts"] if v["capability"] == "reboot")
    assert reboot["status"] == "degraded" and reboot["reasons"][0]["rows"] == ["redfish P1", "DOMAIN 4.1"]
    no_writes(sim, audit_before)
    for bmc_id in bmcs:  # the module's first check: one session (at most one login) per BMC
        logins = sim.bmc_requests(bmc_id).get("POST /redfish/v1/SessionService/Sessions", 0)
        assert logins <= 1, (bmc_id, logins)
    missing = [
        r for r in (host_row(sim, h, v) for h, (v, _, _) in HOSTS.items() if v) if r not in readme_rows()
    ]
    assert not missing, "README's table lacks:\n" + "\n".join(missing)
    # Degraded: said at the operation's start, which goes on (to Temporal, here unreachable: 3).
    reboot_002 = await check(sim, "host", "reboot", "sc-002", "--address", "127.0.0.1:1")
    assert reboot_002.returncode == 3, reboot_002.stderr
    assert "reboot is degraded on sc-002 by the site check of" in reboot_002.stderr


async def test_a_host_operation_under_a_degraded_verdict_says_so_in_its_start_event(
    local_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """Issue 36 deliver 4 for host operations: `host reboot` of a host whose BMC has no PowerCycle
    (degraded, redfish P1) runs, and the words the CLI printed on stderr reach the run: the
    entity's `OperationStarted` Event (the operation's start Event) ends with them. Before, they
    were only the CLI's stderr lines. Its own site: the module's must see no write."""
    one = {"sc-601": ("", "no-powercycle", "BF3")}
    with running_sim(tmp_path / "sim", site_file=site_file(tmp_path / "in", one)) as small:
        assert (await check(small, "site", "check")).returncode == 0  # the kept findings: reboot degraded
        env = rollout_env(small, local_env)
        async with emitting_worker(local_env.client, task_queue, small):
            # 10 s: a 3 s wait ended before `host status` saw the reboot in one full run this stop.
            command = [sys.executable, "-m", "metalflow", "host", "reboot", "sc-601", "--power-down-wait",
                       "10", "--wait", "--task-queue", task_queue]  # fmt: skip
            running = asyncio.ensure_future(
                asyncio.to_thread(
                    subprocess.run, command, capture_output=True, text=True, env=env, timeout=60, cwd=ROOT
                )
            )
            # While it runs, `host status --json` says the words in the reboot's operation too, as
            # reset, reprovision and firmware say them in their own status (low findings item 3).
            operation: dict[str, Any] = {}
            while not running.done() and not operation.get("phase"):
                shown = await metalflow(env, "host", "status", "sc-601", "--json")
                document = json.loads(shown.stdout or "{}") if shown.returncode == 0 else {}
                operation = document.get("operation") or {}
                await asyncio.sleep(0.2)
            assert document["host"]["site"] == "site-check"  # the site file's name, not "default" (item 4)
            assert operation.get("phase"), "the reboot ended before host status saw it run"
            assert any(w.startswith("reboot is degraded on sc-601 by") for w in operation["site_check"])
            rebooted = await running
            assert rebooted.returncode == 0, rebooted.stdout + rebooted.stderr
            assert "reboot is degraded on sc-601 by the site check of" in rebooted.stderr
            said = "site check: reboot is degraded on sc-601 by the site check of"
            deadline = time.monotonic() + 10
            while not (started := [e for e in events_v1(small) if said in e.get("note", "")]):
                assert time.monotonic() < deadline, [
                    (e.get("reason"), e.get("note")) for e in events_v1(small)
                ]
                await asyncio.sleep(0.2)
    assert [e["reason"] for e in started] == ["OperationStarted"], started
    assert started[0]["note"].startswith("reboot (reboot/sc-601/generation-1) requested by ")


async def test_faults_block_what_they_stop_and_an_operation_on_a_blocked_capability_is_refused(
    sim: RunningSim, local_env: WorkflowEnvironment
) -> None:
    for bmc_id, fault in (("sc-001", "wrong-credentials"), ("sc-005-dpu-0", "unreachable")):
        sim_http().post(f"{sim.url}/sim/faults/bmcs/{bmc_id}/{fault}").raise_for_status()
    sim_http().post(
        f"{sim.url}/sim/faults/dpu-bmcs/sc-004-dpu-0/no-powercycle", timeout=10
    ).raise_for_status()
    audit_before = sim.audit()
    try:
        result = await check(sim, "site", "check", "--timeout", "5")
        assert result.returncode == 1, result.stdout + result.stderr  # something blocked
        assert "refuses the stored credentials" in result.stdout and "[redfish F1]" in result.stdout
        no_writes(sim, audit_before)
        missing = [r for r in (host_row(sim, h, v) for h, v in FAULTED.items()) if r not in readme_rows()]
        assert not missing, "README's table lacks:\n" + "\n".join(missing)
        refused = await check(sim, "host", "reboot", "sc-001", "--address", "127.0.0.1:1")
        assert refused.returncode == 1, refused.stderr  # refused before Temporal is asked
        assert "sc-001: refused: reboot is blocked on sc-001" in refused.stderr
        assert "metalflow site check" in refused.stderr and "[redfish F1]" in refused.stderr
        # With --manual-reboot a person reboots: the dead host BMC does not refuse it; it goes on
        # (to Temporal, unreachable here: 3), saying so.
        manual = await check(sim, "host", "reboot", "sc-001", "--manual-reboot", "--address", "127.0.0.1:1")
        assert manual.returncode == 3, manual.stderr
        assert "reboot is degraded on sc-001" in manual.stderr and "a person reboots" in manual.stderr
        full = await check(sim, "host", "reset", "sc-004", "--all-dpus", "--full", "--address", "127.0.0.1:1")
        assert full.returncode == 1 and "does not offer PowerCycle [redfish B5, redfish B13]" in full.stderr
        # A firmware campaign leaves out the hosts `host firmware` is refused on, naming the finding:
        # sc-001 (its host BMC: the activating power cycle) and sc-005 (its DPU's BMC); sc-002 runs.
        fw = ["--firmware", "32.45.1020", "--image", "https://fw.example.test/fw.bin", "--canary", "0"]
        env = rollout_env(sim, local_env)
        hosts = ["--hosts", "sc-001,sc-002,sc-005"]
        planned = await metalflow(
            env, "campaign", "plan", "sc-fw", *hosts, *fw, "--json", "--task-queue", "sc-fw"
        )
        assert planned.returncode == 0, planned.stderr
        plan = json.loads(planned.stdout)
        left = {h: g["reason"] for g in plan["left_out"] for h in g["host_ids"]}
        assert "site check" not in left.get("sc-002", ""), left  # (never provisioned here: DPF's reason)
        assert "firmware is blocked on it by the site check of" in left["sc-005"], left
        assert "sc-005-dpu-0 unreachable" in left["sc-005"] and "[redfish F3]" in left["sc-005"], left
        assert "refuses the stored credentials" in left["sc-001"], left
    finally:
        for bmc_id in ("sc-001", "sc-005-dpu-0"):
            sim_http().post(f"{sim.url}/sim/faults/bmcs/{bmc_id}/clear").raise_for_status()


async def test_another_site_files_check_is_kept_apart_and_a_host_added_since_is_not_checked(
    sim: RunningSim,
) -> None:
    """`site check --site OTHER` replaced the findings of the site in use; a host added to the site
    file after its check ran unwarned. Now each site file keeps its own findings, and an
    operation on a host its check never saw says 'not checked' (degraded: it goes on, to an
    unreachable Temporal here: 3), and that the site file changed since."""
    import yaml

    kept = sim.state_dir / "site-check.json"
    before = kept.read_bytes() if kept.exists() else None
    loaded = yaml.safe_load(sim.site_file.read_text())
    subset = sim.site_file.parent / "subset.yaml"
    subset.write_text(
        yaml.safe_dump({**loaded, "hosts": [h for h in loaded["hosts"] if h["id"] == "sc-002"]})
    )
    checked = await check(sim, "site", "check", "--site", str(subset))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (kept.read_bytes() if kept.exists() else None) == before  # the site in use's findings stand
    assert f"({subset.absolute()})" in checked.stdout and "site-check-" in checked.stdout, checked.stdout
    added = [h for h in loaded["hosts"] if h["id"] in ("sc-002", "sc-003")]
    subset.write_text(yaml.safe_dump({**loaded, "hosts": added}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "METALFLOW_", "KUBECONFIG"))}
    env |= {"METALFLOW_STATE_DIR": str(sim.state_dir), "METALFLOW_SITE_FILE": str(subset)}
    reboot = await metalflow(env, "host", "reboot", "sc-003", "--address", "127.0.0.1:1")
    assert reboot.returncode == 3, reboot.stderr
    assert "reboot is degraded on sc-003" in reboot.stderr and "host sc-003 was not checked" in reboot.stderr
    assert f"the site file {subset.absolute()} changed since the site check" in reboot.stderr


@pytest.mark.parametrize(
    ("version", "said"),
    [
        ("26", "DPF 26: rebootStatus served (dpf O2, R3)"),
        (
            "26.4-rc.3",
            "DPF 26.4-rc.3: no rebootStatus: the host reboot is read from the Rebooted condition (dpf R7)",
        ),
    ],
)
async def test_the_dpf_version_is_read_from_the_served_schema(
    tmp_path: Path, version: str, said: str
) -> None:
    one = {"sc-101": ("", "powercycle", "BF3")}
    with running_sim(
        tmp_path / "sim", site_file=site_file(tmp_path / "in", one), dpf_version=version
    ) as small:
        result = await check(small, "site", "check", "--json")
        assert result.returncode == 0, result.stderr
        document = json.loads(result.stdout)
        assert said in document["info"]
        assert document["findings"]["dpf"]["version"] == version
        assert document["findings"]["grove"]["podgangmap_served"] is True
        findings = load_findings(small.state_dir / "site-check.json")
        assert findings is not None
        seen = row(f"DPF {version}", {v.capability: v.status for v in verdicts(findings)})
        assert seen in readme_rows(), f"README's table lacks:\n{seen}"


async def test_a_podcliqueset_changed_under_on_delete_degrades_the_rollout(sim: RunningSim) -> None:
    """Grove at the pin: after a template change under OnDelete, a scaling-group scale-out stays
    gated (simulators/grove/BEHAVIOUR.md G5); the check names the PodCliqueSet."""
    from kubernetes import client as k8s
    from kubernetes import config

    api = k8s.CustomObjectsApi(config.new_client_from_config(str(sim.kubeconfig)))
    where = ("grove.io", "v1alpha1", "default", "podcliquesets", "inference")
    pcs = api.get_namespaced_custom_object(*where)
    before = pcs["status"]["currentGenerationHash"]
    assert (await check(sim, "site", "check", "--json")).returncode in (0, 1)
    assert load_findings(sim.state_dir / "site-check.json").grove.gated == ()  # type: ignore[union-attr]
    for clique in pcs["spec"]["template"]["cliques"]:  # the test's write, as an operator's edit
        clique["spec"]["podSpec"]["containers"][0]["image"] = "registry.local/inference:2.0"
    api.replace_namespaced_custom_object(*where, pcs)
    deadline = time.monotonic() + 10
    while api.get_namespaced_custom_object(*where)["status"]["currentGenerationHash"] == before:
        assert time.monotonic() < deadline, "Grove did not take the template change"
        time.sleep(0.1)
    audit_before = sim.audit()
    result = await check(sim, "site", "check", "--json")
    document = json.loads(result.stdout)
    assert document["findings"]["grove"]["gated"] == ["default/inference (replica(s) 0)"]
    no_writes(sim, audit_before)
    findings = load_findings(sim.state_dir / "site-check.json")
    assert findings is not None
    site_only = row(
        "Grove: a PodCliqueSet changed under OnDelete (G5)",
        {c: host_verdict(findings, None, c).status for c in CAPABILITIES},  # the site's own rules
    )
    assert site_only in readme_rows(), f"README's table lacks:\n{site_only}"


async def test_a_rollout_or_campaign_on_a_blocked_capability_is_refused_and_nothing_starts(
    local_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The kept findings (here written as a check of a site without PodGangMaps and with DPF
    unreadable would keep them) refuse `rollout start` and a BFB campaign before anything starts."""
    save_findings(
        tmp_path / "site-check.json",
        SiteFindings(
            site="s",
            checked_at="2026-11-29T07:00:00Z",
            dpf=DPFFinding(readable=False, error="refused"),
            grove=GroveFinding(podgangmap_served=False),
        ),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "METALFLOW_", "KUBECONFIG"))}
    env |= {
        "METALFLOW_STATE_DIR": str(tmp_path),
        "TEMPORAL_ADDRESS": local_env.client.service_client.config.target_host,
        "TEMPORAL_CONFIG_FILE": os.devnull,
    }

    async def run(*args: str) -> subprocess.CompletedProcess[str]:
        return await metalflow(env, *args, "--task-queue", "sc-nobody-polls")

    rollout = await run("rollout", "start", "default/sc-inference", "--set", "decode=registry.local/decode:2")
    assert rollout.returncode == 1, rollout.stderr
    assert "refused, nothing started: rollout is blocked on default/sc-inference" in rollout.stderr
    assert "[grove G1]" in rollout.stderr and "metalflow site check" in rollout.stderr
    bfb = ["--bfb", "bf-bundle-2", "--deployment", "sc-dep", "--canary", "0"]
    campaign = await run("campaign", "start", "sc-bfb", "--hosts", "sc-001", *bfb)
    assert campaign.returncode == 1, campaign.stderr
    assert "campaign refused, nothing started: bfb-campaign is blocked on the site" in campaign.stderr
    for workflow_id in (
        names.rollout_workflow_id("default", "sc-inference"),
        names.campaign_workflow_id("sc-bfb"),
    ):
        with pytest.raises(RPCError):  # nothing was started
            await local_env.client.get_workflow_handle(workflow_id).describe()


def rollout_env(sim: RunningSim, env: WorkflowEnvironment) -> dict[str, str]:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "METALFLOW_", "KUBECONFIG"))
    }
    return base | {
        "METALFLOW_STATE_DIR": str(sim.state_dir),
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_CONFIG_FILE": os.devnull,
    }


async def rollout_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    queue = ["--task-queue", "sc-nobody-polls"] if args[0] == "start" else []
    decode = ["--set", "decode=registry.local/decode:2"]
    return await metalflow(env, "rollout", *args, "default/inference", *decode, *queue)


async def test_kai_stale_gang_eviction_and_a_migrated_cluster_block_the_rollout_start_and_plan_say_it(
    local_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """KAI's default SchedulingShard without the staleness argument (eviction on, K4) and pods left
    naming their legacy PodGroup by the migration to PodGangMap (K5, grove#837): the rollout is
    blocked with both reasons; `rollout start` and `rollout plan` refuse from the kept findings and
    send the cluster nothing (its audit log shows no request)."""
    began = datetime.now(UTC)
    one = {"sc-201": ("", "powercycle", "BF3")}
    grove = ("--kai-stale-eviction", "on", "--grove-migrated")
    with running_sim(tmp_path / "sim", site_file=site_file(tmp_path / "in", one), extra=grove) as small:
        audit_before = small.audit()
        result = await check(small, "site", "check", "--json")
        assert result.returncode == 1, result.stdout + result.stderr
        document = json.loads(result.stdout)
        verdict = next(v for v in document["verdicts"] if v["capability"] == "rollout")
        assert verdict["status"] == "blocked"
        assert [r["rows"] for r in verdict["reasons"]] == [["grove K5"], ["grove K4"]]
        assert "stale-gang eviction is on (SchedulingShard default:" in verdict["reasons"][1]["text"]
        legacy = document["findings"]["grove"]["podcliquesets"][0]
        assert legacy["name"] == "default/inference" and legacy["legacy_count"] == 3
        said = "KAI stale-gang eviction: on (SchedulingShard default: default-staleness-grace-period unset, "
        assert said + "KAI's default 60s) (grove K4)" in document["info"]
        no_writes(small, audit_before)
        findings = load_findings(small.state_dir / "site-check.json")
        assert findings is not None
        seen = row(
            "Grove: KAI stale-gang eviction on (K4), cluster migrated to PodGangMap (K5)",
            {v.capability: v.status for v in verdicts(findings)},
        )
        assert seen in readme_rows(), f"README's table lacks:\n{seen}"
        env = rollout_env(small, local_env)
        audit_before = small.audit()
        started = await rollout_cli(env, "start")
        assert started.returncode == 1, started.stderr
        assert "refused, nothing started: rollout is blocked on default/inference" in started.stderr
        assert "[grove K4]" in started.stderr and "grove#837" in started.stderr
        planned = await rollout_cli(env, "plan")
        assert planned.returncode == 1, planned.stdout + planned.stderr
        assert planned.stdout.startswith("start would refuse it: rollout is blocked on default/inference")
        assert small.audit() == audit_before  # the kept findings: no read of the site per operation
    try:  # nothing was started (another module's rollout of default/inference may have run before)
        described = await local_env.client.get_workflow_handle(
            names.rollout_workflow_id("default", "inference")
        ).describe()
    except RPCError:
        pass
    else:
        assert described.start_time < began, described


async def test_groves_default_scheduler_degrades_the_rollout_which_plan_start_and_status_say(
    local_env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    """Grove's chart without `defaultProfileName`: its pods go to default-scheduler, which does no
    gang scheduling (K1, K2): degraded; `rollout plan` says it on stderr and plans; the rollout
    runs and says it in its status's warnings and its workflow's details in the UI (deliver 4)."""
    one = {"sc-301": ("", "powercycle", "BF3")}
    grove = ("--grove-scheduler", "default-scheduler")
    with running_sim(tmp_path / "sim", site_file=site_file(tmp_path / "in", one), extra=grove) as small:
        result = await check(small, "site", "check", "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        document = json.loads(result.stdout)
        assert document["findings"]["grove"]["default_backend"] == "default-scheduler"
        assert document["findings"]["grove"]["kai_eviction"] == ""  # no PodCliqueSet under KAI: not read
        findings = load_findings(small.state_dir / "site-check.json")
        assert findings is not None
        seen = row(
            "Grove: default-scheduler backend (K2)", {v.capability: v.status for v in verdicts(findings)}
        )
        assert seen in readme_rows(), f"README's table lacks:\n{seen}"
        planned = await rollout_cli(rollout_env(small, local_env), "plan", "--allow-replica-outage")
        assert planned.returncode == 0, planned.stdout + planned.stderr
        assert "rollout is degraded on default/inference by the site check of" in planned.stderr
        assert "does no gang scheduling" in planned.stderr and "[grove K1, grove K2]" in planned.stderr
        env = rollout_env(small, local_env)
        async with worker_for(local_env.client, task_queue, small):
            started = await metalflow(
                env, "rollout", "start", "--allow-replica-outage", "default/inference",
                "--set", "decode=registry.local/decode:2", "--wait", "--task-queue", task_queue,
            )  # fmt: skip
            assert started.returncode == 0, started.stdout + started.stderr
        assert "warning: rollout is degraded on default/inference by the site check of" in started.stdout
        handle = local_env.client.get_workflow_handle(
            names.rollout_workflow_id("default", "inference"), result_type=RolloutResult
        )
        status = (await handle.result()).warnings
        assert (
            status[0].startswith("rollout is degraded on default/inference")
            and "[grove K1, grove K2]" in status[1]
        )
        details = await (await handle.describe()).static_details()
        assert details is not None and "does no gang scheduling" in details


async def test_dpf_zero_trust_managing_the_dpu_bmc_credentials_is_said_in_words_and_refuses_the_reset(
    tmp_path: Path,
) -> None:
    """DPF 26.8 in zero trust onboarded the DPUs (`--dpf-bmc-credentials per-dpu`, dpf Z1): it
    factory-reset each DPU BMC and set a per-DPU password the site file does not hold. The check
    reads the trust mode, the DPUDeployment strategies and, per DPU BMC, that DPF holds its
    credentials; the DPU resets and firmware are blocked naming DPF's Secret and what to do, not a
    bare 401; `host reset --all-dpus` is refused with those words."""
    one = {"sc-401": ("", "powercycle", "BF3")}
    with running_sim(
        tmp_path / "sim", site_file=site_file(tmp_path / "in", one), dpf_version="26", initialised=True,
        extra=("--dpf-bmc-credentials", "per-dpu"),
    ) as small:  # fmt: skip
        audit_before = small.audit()
        result = await check(small, "site", "check", "--json", "--timeout", "5")
        assert result.returncode == 1, result.stdout + result.stderr
        document = json.loads(result.stdout)
        assert "DPF trust mode: zero-trust (1 DPU(s), status.deploymentMode) (dpf Z1)" in document["info"]
        assert "DPUDeployment strategies: dpf-operator-system/gpu-compute: OnDelete" in document["info"]
        # the agents' reboot-method discovery (dpf R4), read from the DPUs already listed: an
        # initialised Ready DPU's agent started in DPU Config and reported (dpf A5; issue 36 attack
        # item 3: it carried no report, read as "not reported yet", a DPU never provisioned)
        discovery = "DPU agents' reboot-method discovery: device query (RebootMethodDiscovery=True"
        assert any(line.startswith(discovery) for line in document["info"]), document["info"]
        bmc = next(b for b in document["findings"]["bmcs"] if b["bmc_id"] == "sc-401-dpu-0")
        assert bmc["credentials_by"] == "dpf" and not bmc["credentials_ok"]
        assert (
            "Secret device-sc-401-dpu-0-bmc-v1; BMCFactoryResetReady True FactoryResetCompleted"
            in (bmc["dpf_credentials"])
        )
        reset = next(v for v in document["verdicts"] if v["capability"] == "reset-dpu")
        assert reset["status"] == "blocked" and reset["reasons"][0]["rows"] == ["dpf Z1", "redfish F1"]
        no_writes(small, audit_before)
        seen = host_row(small, "sc-401", "DPF 26.8 zero trust: DPU BMC credentials set by DPF (Z1)")
        assert seen in readme_rows(), f"README's table lacks:\n{seen}"
        refused = await check(small, "host", "reset", "sc-401", "--all-dpus", "--address", "127.0.0.1:1")
        assert refused.returncode == 1, refused.stderr
        assert (
            "DPF manages this BMC's credentials" in refused.stderr
            and "[dpf Z1, redfish F1]" in refused.stderr
        )


async def test_a_host_trusted_dpf_leaves_the_dpu_bmc_credentials_ours(tmp_path: Path) -> None:
    """DPF 26 host trusted (`--dpf-deployment-mode host-trusted`, dpf P1, Z1): the DPUs say so in
    `status.deploymentMode`; DPF installs through the host agent and never uses the DPU BMC, so
    its credentials are the site file's."""
    one = {"sc-501": ("", "powercycle", "BF3")}
    with running_sim(
        tmp_path / "sim", site_file=site_file(tmp_path / "in", one), dpf_version="26", initialised=True,
        dpf_deployment_mode="host-trusted",
    ) as small:  # fmt: skip
        result = await check(small, "site", "check", "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        document = json.loads(result.stdout)
        assert "DPF trust mode: host-trusted (1 DPU(s), status.deploymentMode) (dpf Z1)" in document["info"]
        bmc = next(b for b in document["findings"]["bmcs"] if b["bmc_id"] == "sc-501-dpu-0")
        assert bmc["credentials_by"] == "ours" and bmc["credentials_ok"]
        seen = host_row(small, "sc-501", "DPF 26 host trusted (P1, Z1)")
        assert seen in readme_rows(), f"README's table lacks:\n{seen}"
