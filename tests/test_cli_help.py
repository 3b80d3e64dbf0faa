"""Help that matches: every command and option explained, and README's command list equal to
what `metalflow --help` offers."""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
from pathlib import Path

from cli_support import METALFLOW

from metalflow.cli import COMMAND_MODULE, SUBCOMMAND_MODULES, build_parser
from metalflow.cli.commands import command_list, leaf_commands, subcommands

README = Path(__file__).resolve().parents[1] / "README.md"


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


def test_metalflow_help_lists_each_command_with_readmes_words() -> None:
    """`metalflow [GROUP] --help` as a user runs it shows every command README lists, same words."""
    for group in ((), ("sim",), ("bmc",), ("host",)):
        shown = subprocess.run([METALFLOW, *group, "--help"], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        flat = " ".join(re.sub(r"-\n\s+", "-", shown.stdout).split())  # argparse wraps after hyphens
        for command, text in leaf_commands(build_parser()):
            words = command.split()[1:]
            if tuple(words[:-1]) == group:
                assert f"{words[-1]} {' '.join(text.split())}" in flat, (command, shown.stdout)


def test_host_status_takes_no_requester() -> None:
    status = subprocess.run(
        [METALFLOW, "host", "status", "host-001", "--by", "x"], capture_output=True, text=True, timeout=60
    )
    assert status.returncode == 2 and "unrecognized arguments: --by" in status.stderr


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
        assert alone == everything and handlers[0].__qualname__ == handlers[1].__qualname__, argv
