"""Every command held to README's exit-status table (`metalflow/cli/exits.py`), against the
session's Temporal and a simulated site, in command servers (tests/cli_support.py):

- for every command, a row naming an object that does not exist, or bad input: exit 2, one
  reason on stderr, nothing on stdout but, with `--json` (every command that has it), exactly one
  JSON document (`{"error": ..., "exit_status": 2}`);
- for every command that talks to Temporal, the same words with a Temporal that cannot be reached,
  and for the others a simulator, a cluster or a BMC that cannot be: exit 3;
- for every `--json` command that reads without a workflow, a run that succeeds: one document.

`ROWS` must name every command (`test_every_command_has_a_row`): a new command gets its row.
Issue 38 item 6: before this module an unknown host exited 1 in some commands and 2 in others,
`events host-999` printed "none" and exited 0, `--json` printed nothing on an error and several
documents in `host versions`, and a lost Temporal exited 2 like bad input.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import metalflow, metalflow_env, run_in_command_server, run_in_few_processes, use_site_file
from sim_support import RunningSim, prefixed_sim
from temporalio.testing import WorkflowEnvironment

from contracts.models.grove import PCSRef, RolloutInput
from metalflow.cli import build_parser, exits
from metalflow.cli.commands import subcommands
from metalflow.cli.connection import unreachable

KNOWN, UNKNOWN = "exc-001", "exc-999"
QUEUE = ["--task-queue", "exc-nobody-polls"]
DEAD = "127.0.0.1:9"  # nothing listens on the discard port
BAD = "--no-such-option"

# (command words) -> the rest of a command line naming an unknown object or bad input; "{S}" is the
# running simulator's state dir, "{E}" an empty one, "{T}" the test's temporary directory.
ROWS: dict[tuple[str, ...], list[str]] = {
    ("dev",): ["--state-dir", "{T}/dev", "--port", "7391", "--ui-port", "7391", "--no-demo"],
    ("sim", "up"): ["--hosts", "0", "--state-dir", "{T}/up"],
    ("sim", "down"): ["--state-dir", "{E}"],
    ("sim", "violations"): ["--state-dir", "{E}", "--json"],
    ("sim", "power-log"): [UNKNOWN, "--state-dir", "{S}", "--json"],
    ("sim", "fault", "bmc"): [UNKNOWN, "unreachable", "--state-dir", "{S}"],
    ("sim", "fault", "dpu"): [f"{UNKNOWN}-dpu-0", "error", "--state-dir", "{S}"],
    ("sim", "fault", "podgang"): ["exc-no-such-gang", "never-available", "--state-dir", "{S}"],
    ("bmc", "check"): [UNKNOWN],
    ("bmc", "power"): [UNKNOWN, "status"],
    ("site", "check"): ["--site", "{E}/no-such-site.yaml", "--json"],
    ("host", "provision"): [UNKNOWN, *QUEUE],
    ("host", "reprovision"): [UNKNOWN, *QUEUE],
    ("host", "reboot"): [UNKNOWN, *QUEUE],
    ("host", "firmware"): [UNKNOWN, "--version", "1.0", "--image", "http://127.0.0.1:9/fw.bin", *QUEUE],
    ("host", "remove"): [UNKNOWN, *QUEUE],
    ("host", "reset"): [UNKNOWN, "--host", *QUEUE],
    ("host", "monitor"): [UNKNOWN, "--status"],
    ("host", "maintenance"): [UNKNOWN, "on", "--reason", "fan", "--json", *QUEUE],
    ("host", "retry"): [UNKNOWN, "--json"],
    ("host", "abort"): [UNKNOWN, "--json"],
    ("host", "mark-rebooted"): [UNKNOWN, "--json"],
    ("host", "list"): ["--phase", "exc-no-such-phase", "--json"],
    ("host", "versions"): [UNKNOWN, "--json"],
    ("host", "status"): [UNKNOWN, "--json"],
    ("host", "assign"): [UNKNOWN, "inst-1", *QUEUE],
    ("host", "release"): [UNKNOWN, "inst-1", *QUEUE],
    ("host-rebooted",): [UNKNOWN, "--json"],
    ("approve",): [UNKNOWN],
    ("rollout", "start"): ["default/exc-nope", "--set", "a=registry.local/a:1", *QUEUE],
    ("rollout", "plan"): ["default/exc-nope", "--set", "a=registry.local/a:1", "--json"],
    ("rollout", "status"): ["default/exc-nope", "--json"],
    ("rollout", "pause"): ["default/exc-nope"],
    ("rollout", "resume"): ["default/exc-nope"],
    ("rollout", "abort"): ["default/exc-nope"],
    ("rollout", "rollback"): ["default/exc-nope"],
    ("rollout", "scale"): ["default/exc-nope", "--replicas", "2"],
    ("campaign", "start"): ["exc-c", "--hosts", UNKNOWN, "--reprovision", *QUEUE],
    ("campaign", "plan"): ["exc-c", "--hosts", UNKNOWN, "--reprovision", *QUEUE, "--json"],
    ("campaign", "status"): ["exc-nope", "--json"],
    ("campaign", "hosts"): ["exc-nope", "--json"],
    ("campaign", "pause"): ["exc-nope"],
    ("campaign", "resume"): ["exc-nope"],
    ("campaign", "retry-failed"): ["exc-nope"],
    ("campaign", "abort"): ["exc-nope"],
    ("campaign", "skip"): ["exc-nope", KNOWN],
    ("campaign", "limits"): ["exc-nope", "--batch-size", "2"],
    ("campaign", "list"): [BAD, "--json"],
    ("campaign", "schedule"): ["delete", "exc-nope"],
    ("campaign", "schedules"): [BAD],
    ("events",): [UNKNOWN, "--json"],
}

# The same words with everything known, for the Temporal that cannot be reached (where the
# unknown row's words would be refused before connecting).
REACHABLE_WORDS = {
    ("sim", "violations"): ["--state-dir", "{S}", "--json"],
    ("host", "list"): ["--json"],
    ("host", "versions"): [KNOWN, "--json", "--refresh"],  # only `--refresh` talks to Temporal
    ("campaign", "list"): ["--json"],
    ("campaign", "schedules"): [],
    ("campaign", "start"): ["exc-c", "--hosts", KNOWN, "--reprovision", *QUEUE],
    ("campaign", "plan"): ["exc-c", "--hosts", KNOWN, "--reprovision", *QUEUE, "--json"],
}

# Reads that succeed here: each prints exactly one JSON document.
SUCCEEDING_JSON = [
    ["host", "versions", KNOWN, "--json"],
    ["host", "list", "--json"],
    ["sim", "violations", "--state-dir", "{S}", "--json"],
    ["sim", "power-log", KNOWN, "--state-dir", "{S}", "--json"],
    ["campaign", "list", "--json"],  # issue 38: `campaign list` and `events` had no --json
    ["events", KNOWN, "--json"],
]


def leaves() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    return {
        path: parser
        for path, parser, _ in subcommands(build_parser())
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
    }


def talks_to_temporal(parser: argparse.ArgumentParser) -> bool:
    return bool(getattr(parser.get_default("handler"), "talks_to_temporal", False))


def has_json(parser: argparse.ArgumentParser) -> bool:
    return any("--json" in action.option_strings for action in parser._actions)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("sim"), "exc", hosts=1, dpus_per_host=1) as running:
        use_site_file(running.site_file)
        yield running


def test_every_command_has_a_row() -> None:
    commands = leaves()
    assert set(ROWS) == set(commands)
    for path, parser in commands.items():  # every `--json` command shows its error as JSON
        assert has_json(parser) == ("--json" in ROWS[path]), path


def unreachable_site(directory: Path) -> dict[str, str]:
    """Variables pointing `bmc` at a BMC and `events` at a cluster nobody serves, and a state dir
    whose simulator is gone; a credentials file, so the BMC's own address is what fails."""
    directory.mkdir(parents=True, exist_ok=True)
    credentials = directory / "creds.json"
    credentials.write_text(json.dumps({"username": "u", "password": "p"}))
    site = directory / "site.yaml"
    bmc = {"endpoint": f"http://{DEAD}", "credentials": {"file": str(credentials)}}
    site.write_text(json.dumps({"name": "gone", "hosts": [{"id": KNOWN, "bmc": bmc}]}))
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(
        json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "gone",
            "clusters": [{"name": "gone", "cluster": {"server": f"http://{DEAD}"}}],
            "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}],
            "users": [{"name": "gone", "user": {"token": "t"}}],
        })
    )  # fmt: skip
    (directory / "sim.json").write_text(json.dumps({"url": f"http://{DEAD}", "pid": 0}))
    return {"METALFLOW_SITE_FILE": str(site), "KUBECONFIG": str(kubeconfig)}


async def test_every_command_exits_by_the_table(
    local_env: WorkflowEnvironment, sim: RunningSim, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    gone = tmp_path / "gone"
    gone_env = unreachable_site(gone)

    def fill(words: list[str], state: Path = sim.state_dir) -> list[str]:
        return [
            w.replace("{S}", str(state)).replace("{E}", str(empty)).replace("{T}", str(tmp_path))
            for w in words
        ]

    commands = leaves()
    rows: list[tuple[str, list[str], dict[str, str], int]] = []
    for path, words in ROWS.items():
        rows.append(("unknown or bad", [*path, *fill(words)], {}, exits.USAGE))
        known = REACHABLE_WORDS.get(path, [KNOWN if w == UNKNOWN else w for w in words])
        # `site check` takes --address only to tell running campaigns of new blocks, and `bmc
        # power` only to tell the host's entity of an on/off/cycle it did (planned power; `status`
        # tells nobody): Temporal unreachable is said on stderr and never changes their exit, the
        # check's or the power action's (README, issues 36 and 40).
        if talks_to_temporal(commands[path]) and path not in (("site", "check"), ("bmc", "power")):
            rows.append(
                ("Temporal unreachable", [*path, *fill(known), "--address", DEAD], {}, exits.UNREACHABLE)
            )
        if path[0] in ("sim", "bmc", "events") and path[:2] not in (("sim", "up"), ("sim", "down")):
            timeout = ["--timeout", "2"] if path[0] == "bmc" else []
            rows.append(("unreachable", [*path, *fill(known, gone), *timeout], gone_env, exits.UNREACHABLE))
    for words in SUCCEEDING_JSON:
        rows.append(("succeeds", fill(words), {}, exits.OK))

    results = await run_in_few_processes(
        [(argv, extra) for _, argv, extra, _ in rows], metalflow_env(local_env), per_process=12
    )
    problems = []
    for (what, argv, _, wanted), (status, out, err) in zip(rows, results, strict=True):
        shown = (
            f"{what}: metalflow {' '.join(argv)}: exit {status}, stdout {out[:300]!r}, stderr {err[:300]!r}"
        )
        if status != wanted or "Traceback" in err:
            problems.append(shown)
            continue
        if wanted != exits.OK and not (err.strip() or out.strip()):
            problems.append(f"{shown} (no reason given)")
        if what == "Temporal unreachable" and not _said_as_everywhere(out + err):
            problems.append(f"{shown} (not the one wording of an unreachable Temporal)")
        if "--json" in argv:
            try:
                document = json.loads(out)  # exactly one document: a second is "Extra data"
            except ValueError as error:
                problems.append(f"{shown} (stdout is not one JSON document: {error})")
                continue
            if wanted != exits.OK and isinstance(document, dict) and "error" in document:
                if document.get("exit_status") != wanted:
                    problems.append(f"{shown} (its JSON error names another status)")
        elif what == "unknown or bad" and out.strip():  # refused before it did anything
            problems.append(f"{shown} (a refusal printed on stdout)")
    assert problems == [], "\n".join(problems)


def _said_as_everywhere(text: str) -> bool:
    """Issue 38: `host status` and `campaign list` said an unreachable Temporal two ways; every
    command says it with `connection.unreachable` (the error's type name apart)."""
    before, _, after = unreachable(DEAD, RuntimeError()).partition("(RuntimeError)")
    return before in text and after in text


async def test_status_json_of_an_ended_run_nobody_can_read_is_one_document(
    local_env: WorkflowEnvironment, sim: RunningSim
) -> None:
    """`rollout status --json` printed nothing on stdout when the run had ended and its status
    could not be read (no worker replays a closed run's query): the reason went to stderr only.
    Now the one document is the error, with the status the table gives it (1: it ended badly)."""
    name = f"exc-gone-{uuid.uuid4().hex[:6]}"
    nobody = f"exc-nobody-{uuid.uuid4().hex[:6]}"
    rollout = await local_env.client.start_workflow(
        "RolloutWorkflow",
        RolloutInput(
            pcs=PCSRef(namespace="default", name=name), images={"a": "r.local/a:1"}, requested_by="t"
        ),
        id=f"rollout/default/{name}", task_queue=nobody,
    )  # fmt: skip
    await rollout.terminate(reason="cut short by the exit-code test")
    status, out, err = await run_in_command_server(
        ["rollout", "status", f"default/{name}", "--json"], metalflow_env(local_env)
    )
    assert status == exits.FAILED, (status, out, err)
    shown = json.loads(out)
    assert shown["exit_status"] == exits.FAILED
    assert f"rollout/default/{name} was terminated: cut short by the exit-code test" in shown["error"]
    assert shown["error"] in err  # the same reason on stderr


async def test_events_finds_temporal_as_every_command_and_says_when_it_cannot(
    local_env: WorkflowEnvironment, sim: RunningSim
) -> None:
    """`events HOST` once tried only 127.0.0.1:7233 and exited 0 saying it could not reach
    Temporal: it takes --address/--namespace, finds Temporal as every command does, and exits 3."""
    found = await metalflow(local_env, "events", KNOWN)
    assert found.status == exits.OK, found
    assert f"Operations of {KNOWN} (Temporal):" in found.stdout and "cannot reach" not in found.stdout, found
    away = await metalflow(local_env, "events", KNOWN, "--address", DEAD)
    assert away.status == exits.UNREACHABLE, away
    assert "Events about" in away.stdout, away  # the cluster's Events are still shown
    assert f"cannot reach Temporal at {DEAD}" in away.stdout, away
