"""The `metalflow` command line: one subcommand module per topic, each with `register(subparsers)`.

A subcommand module adds its parser and sets ``handler`` (a function taking the parsed
arguments and returning the exit status) with ``parser.set_defaults(handler=...)``.

Exit statuses: 0 success, 1 the operation failed, 2 usage or configuration error, 141 the
reader of stdout went away (`metalflow ... | head -1`; `reader_gone`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from metalflow.cli import connection

# The subcommand modules, in `--help`'s order, and the module of each top-level command word.
# `main` imports only the module of the command it runs: importing all of them cost ~1.6 s of CPU
# before any command did anything (the Redfish client, the Kubernetes client and the campaign
# models are each imported by one topic only). `--help`, no command and an unknown word import
# them all. tests/test_cli_help.py checks this map against what the modules register.
SUBCOMMAND_MODULES = ("dev", "sim", "bmc", "host", "rollout", "campaign", "events")
COMMAND_MODULE = {
    "dev": "dev", "sim": "sim", "bmc": "bmc", "host": "host", "host-rebooted": "host",
    "approve": "host", "rollout": "rollout", "campaign": "campaign", "events": "events",
}  # fmt: skip

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
# 128 + SIGPIPE: what `cat` or `grep` report when their reader goes away, so `set -o pipefail`
# scripts see the usual broken pipe, never one of the statuses above (1 would read as a failure).
EXIT_BROKEN_PIPE = 141


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `metalflow` command; returns the exit status."""
    try:
        return _run(argv)
    except BrokenPipeError:
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
    args = parser.parse_args(words)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    status: int = handler(args)
    return status
