"""The `metalflow` command line: one subcommand module per topic, each with `register(subparsers)`.

A subcommand module adds its parser and sets ``handler`` (a function taking the parsed
arguments and returning the exit status) with ``parser.set_defaults(handler=...)``.

Exit statuses: 0 success, 1 the operation failed, 2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from metalflow.cli import bmc, campaign, connection, dev, events, host, rollout, sim

SUBCOMMANDS = [dev, sim, bmc, host, rollout, campaign, events]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """A usage error is one line on stderr and exit status 2 (argparse prints the whole usage
    first; scripts and people look for the reason, which `--help` complements)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = Parser(
        prog="metalflow",
        description="Durable Temporal workflows for bare-metal hosts, their DPUs and Grove workloads.",
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(subparsers)
    connection.add_to_temporal_commands(parser)  # --address, --namespace, like the Temporal CLI
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `metalflow` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    status: int = handler(args)
    return status
