"""The `metalflow` command line: one subcommand module per topic, each with `register(subparsers)`.

A subcommand module adds its parser and sets ``handler`` (a function taking the parsed
arguments and returning the exit status) with ``parser.set_defaults(handler=...)``.

Exit statuses: `metalflow.cli.exits` (README's table): 0 done, 1 failed or refused by the world,
2 bad input or an unknown object, 3 Temporal, the cluster, the simulator or a BMC unreachable, 130
interrupted, 141 the reader of stdout went away (`metalflow ... | head -1`; `reader_gone`). A
command given `--json` prints exactly one JSON document on stdout (`exits.JsonOutput`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from metalflow.cli import connection, exits
from metalflow.cli.commands import subcommands

# The subcommand modules, in `--help`'s order, and the module of each top-level command word.
# `main` imports only the module of the command it runs: importing all of them cost ~1.6 s of CPU
# before any command did anything (the Redfish client, the Kubernetes client and the campaign
# models are each imported by one topic only). `--help`, no command and an unknown word import
# them all. tests/test_cli_help.py checks this map against what the modules register.
SUBCOMMAND_MODULES = ("dev", "sim", "bmc", "site", "host", "rollout", "campaign", "events")
COMMAND_MODULE = {
    "dev": "dev", "sim": "sim", "bmc": "bmc", "site": "site", "host": "host", "host-rebooted": "host",
    "approve": "host", "rollout": "rollout", "campaign": "campaign", "events": "events",
}  # fmt: skip

EXIT_OK = exits.OK
EXIT_FAILED = exits.FAILED
EXIT_USAGE = exits.USAGE
EXIT_BROKEN_PIPE = exits.BROKEN_PIPE


class Parser(argparse.ArgumentParser):
    """A usage error is one line on stderr and exit status 2 (argparse prints the whole usage
    first; scripts and people look for the reason, which `--help` complements)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered, or only `command`'s module's."""
    parser = Parser(
        prog="metalflow",
        description="Durable Temporal workflows for bare-metal hosts, their DPUs and Grove workloads.",
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    names = (COMMAND_MODULE[command],) if command in COMMAND_MODULE else SUBCOMMAND_MODULES
    for name in names:
        importlib.import_module(f"metalflow.cli.{name}").register(subparsers)
    connection.add_to_temporal_commands(parser)  # --address, --namespace, like the Temporal CLI
    for _, child, _ in subcommands(parser):  # the deepest command parsed names itself (`_run`)
        child.set_defaults(command_parser=child)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `metalflow` command; returns the exit status. The reader of stdout going away
    ends every command the same way, here: quietly, exit 141 (`exits.ReaderGone`)."""
    exits.guard_stdout()
    try:
        status = _run(argv)
        sys.stdout.flush()  # what is still buffered, before the interpreter's own flush at exit
        return status
    except (BrokenPipeError, exits.ReaderGone):
        return reader_gone()


def reader_gone() -> int:
    """The reader of stdout went away: end quietly, EXIT_BROKEN_PIPE. Python's idiom: stdout
    points at devnull, so the flush at exit does not fail (and print a traceback) again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def _run(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words else None)
    if "--json" in words:  # one JSON document on stdout, a usage error's included
        exits.JsonOutput()
    status = EXIT_USAGE
    try:
        args, extra = parser.parse_known_args(words)
        if extra:  # argparse would name `metalflow` only: name the command the words were for
            getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
        if not getattr(args, "json", False):
            exits.JsonOutput.finish(EXIT_OK)  # `--json` was some other option's value
        handler = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        status = EXIT_FAILED  # should the handler raise: Python exits 1
        status = int(handler(args))
        return status
    except (BrokenPipeError, exits.ReaderGone):  # `main` ends quietly
        status = EXIT_BROKEN_PIPE
        raise
    except SystemExit as exit_:  # a usage error, or --help
        code = exit_.code
        status = code if isinstance(code, int) else EXIT_OK if code is None else EXIT_FAILED  # as Python
        raise
    finally:
        exits.JsonOutput.finish(status)
