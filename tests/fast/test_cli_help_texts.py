"""Help that matches, without a process: every command and option explained, README's command list
equal to the parser's, and each command word mapped to the module that registers it. (The console
script's own --help: tests/test_cli_help.py.)"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from metalflow.cli import COMMAND_MODULE, SUBCOMMAND_MODULES, build_parser
from metalflow.cli.commands import command_list, subcommands

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_command_has_a_description_and_every_option_a_help_text() -> None:
    missing = []
    for path, parser, text in subcommands(build_parser()):
        name = " ".join(path)
        if not parser.description:
            missing.append(f"{name}: no description")
        if not text:
            missing.append(f"{name}: no one-line help")
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            if not action.help:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}: no help")
    assert missing == []


def test_readmes_command_list_is_the_parsers() -> None:
    found = re.search(r"^## Commands\n.*?^```text\n(.*?)^```", README.read_text(), re.M | re.S)
    assert found, "README has no Commands section with a ```text block"
    assert found.group(1).rstrip("\n") == command_list(build_parser()), (
        "README's command list differs from the parser's: paste `python -m metalflow.cli.commands` into it"
    )


def test_each_command_word_names_the_module_that_registers_it() -> None:
    """`main` imports only the named command's module (metalflow/cli/__init__.py): the map must name,
    for every top-level word `metalflow --help` offers, the module that registers it, and a command
    parsed with only that module must parse as with all of them."""
    registered = {}
    for name in SUBCOMMAND_MODULES:
        parser = argparse.ArgumentParser()
        importlib.import_module(f"metalflow.cli.{name}").register(parser.add_subparsers())
        registered |= {path[0]: name for path, _, _ in subcommands(parser)}
    assert COMMAND_MODULE == registered
    for argv in (
        ["host", "status", "h1", "--json"],
        ["approve", "h1"],
        ["campaign", "list"],
        ["dev", "--no-demo"],
    ):
        alone, everything = (vars(p.parse_args(argv)) for p in (build_parser(argv[0]), build_parser()))
        handlers = alone.pop("handler"), everything.pop("handler")  # each parser makes its own
        assert alone.pop("command_parser").prog == everything.pop("command_parser").prog, argv
        assert alone == everything and handlers[0].__qualname__ == handlers[1].__qualname__, argv


def test_rollout_plan_and_start_take_the_same_change_and_name_a_missing_namespace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    args = ["--set", "prefill=img:2", "--concurrency", "2", "--allow-replica-outage"]
    plan = parser.parse_args(["rollout", "plan", "default/inference", *args])
    start = parser.parse_args(["rollout", "start", "default/inference", *args])
    for name in ("images", "concurrency", "allow_replica_outage"):
        assert getattr(plan, name) == getattr(start, name), name
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["rollout", "plan", "inference", "--set", "prefill=img:2"])
    assert exit_.value.code == 2
    assert "'inference': give NAMESPACE/PCS, e.g. default/inference (the namespace is missing)" in (
        capsys.readouterr().err
    )
