"""One exit-status table for every command (`metalflow/cli/exits.py`), without a process: README
shows exactly that table, no CLI module numbers statuses of its own, every command's usage error
names the whole command, and `--json` prints one JSON document on stdout for a usage error too.
(What each command returns for an unknown object, bad input and an unreachable Temporal, run
against a real server and site: tests/test_cli_exit_codes.py.)"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from metalflow.cli import build_parser, exits, main
from metalflow.cli.commands import subcommands
from metalflow.cli.host_phases import KNOWN_PHASES

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def leaves() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command that does something, with its parser."""
    return [
        (path, parser)
        for path, parser, _ in subcommands(build_parser())
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
    ]


def run(*argv: str) -> tuple[int, str, str]:
    """`metalflow ARGV` in this process, for arguments that never reach a handler."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else 1
    return status, out.getvalue(), err.getvalue()


def test_readme_shows_the_table_of_exits_py() -> None:
    assert exits.table() in README.read_text(), (
        "README's exit-status table differs from metalflow/cli/exits.py: paste `exits.table()` into it"
    )
    statuses = [status for status, _ in exits.TABLE]
    assert statuses == sorted(set(statuses))
    assert {exits.OK, exits.FAILED, exits.USAGE, exits.UNREACHABLE} <= set(statuses)


def test_no_cli_module_numbers_exit_statuses_of_its_own() -> None:
    """Each status comes from exits.py: a literal `return 2`, `EXIT_X = 1` or `SystemExit("...")`
    (which exits 1) in a command module is how the same case came to exit 1 here and 2 there."""
    found = []
    for path in sorted((ROOT / "metalflow" / "cli").glob("*.py")):
        if path.name == "exits.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if (
                re.search(r"^\s*return \d+\s*$", code)
                or re.search(r"^EXIT_[A-Z_, ]+=\s*\d", code)
                or re.search(r"SystemExit\(f?[\"']", code)
                or re.search(r"(Error|fail)\(.*, [0-9]+\)\s*$", code)
            ):
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == []


@pytest.mark.parametrize(
    ("path", "parser"), leaves(), ids=lambda v: " ".join(v) if isinstance(v, tuple) else ""
)
def test_a_usage_error_names_the_whole_command(
    path: tuple[str, ...], parser: argparse.ArgumentParser
) -> None:
    """argparse reported an unknown option from the top parser (`metalflow: error: ...`): the
    operator could not tell which command's `--help` to read."""
    status, out, err = run(*path, "--no-such-option")
    assert status == exits.USAGE
    assert out == ""
    assert err.startswith(f"metalflow {' '.join(path)}: error: "), err


def with_json() -> list[tuple[str, ...]]:
    return [path for path, parser in leaves() if any("--json" in a.option_strings for a in parser._actions)]


@pytest.mark.parametrize("path", with_json(), ids=" ".join)
def test_json_prints_one_document_for_a_usage_error_too(path: tuple[str, ...]) -> None:
    status, out, err = run(*path, "--json", "--no-such-option")
    assert status == exits.USAGE
    shown = json.loads(out)  # exactly one document: json.loads refuses a second
    assert shown["exit_status"] == exits.USAGE
    assert err.startswith(f"metalflow {' '.join(path)}: error: ")  # the reason stays on stderr
    assert shown["error"] == err.strip()


def test_every_json_command_is_known() -> None:
    """The commands with `--json`; a new one is added to tests/test_cli_exit_codes.py's rows."""
    assert {" ".join(p) for p in with_json()} == {
        "sim violations", "sim power-log", "host list", "host versions", "host status", "host maintenance",
        "host retry", "host abort", "host mark-rebooted", "host-rebooted",
        "rollout plan", "rollout status", "campaign plan", "campaign status", "campaign hosts", "site check",
        "campaign list", "events",  # issue 38: the two listings without --json
    }  # fmt: skip


def test_host_list_phase_takes_every_phase_as_its_phase_column_prints_it() -> None:
    """`host list` prints `running reprovision`; `--phase running reprovision`, copied from it,
    was refused (argparse: unrecognized arguments: reprovision)."""
    parser = build_parser()
    for phase in sorted(KNOWN_PHASES):
        assert parser.parse_args(["host", "list", "--phase", *phase.split()]).phase == phase
        assert parser.parse_args(["host", "list", "--phase", phase]).phase == phase
    status, _, err = run("host", "list", "--phase", "running", "nonsense")
    assert status == exits.USAGE and "unknown phase 'running nonsense'" in err


def test_a_runs_own_refusal_exits_2_for_bad_input_else_1() -> None:
    """`until_past` (a start whose run refused at once) exited 2 for every refusal, where `plan`
    exits 1 for what the world refuses: now the refusal's type decides, as the table says."""
    from temporalio.exceptions import ApplicationError, ChildWorkflowError, RetryState

    from metalflow.cli.workflow_commands import refusal_status

    def wrapped(kind: str) -> BaseException:
        outer = ChildWorkflowError(
            "child failed", namespace="n", workflow_id="w", run_id="r", workflow_type="T",
            initiated_event_id=1, started_event_id=2, retry_state=RetryState.NON_RETRYABLE_FAILURE,
        )  # fmt: skip
        outer.__cause__ = ApplicationError("why", type=kind)
        return outer

    assert refusal_status(ApplicationError("no such group", type="InvalidInput")) == exits.USAGE
    assert refusal_status(ApplicationError("gone", type="ObjectNotFound")) == exits.USAGE
    assert refusal_status(ApplicationError("held by campaign/b", type="CampaignRefused")) == exits.FAILED
    assert refusal_status(ValueError("anything else")) == exits.FAILED
    assert refusal_status(wrapped("InvalidInput")) == exits.USAGE
