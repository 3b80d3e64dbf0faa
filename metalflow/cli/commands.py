"""The command list README shows, made from the parser itself: `python -m metalflow.cli.commands`.

tests/test_cli_help.py compares README's list with this output, so README names exactly the
commands `metalflow --help` has, with the same one-line help; after adding a command, paste this
output into README's "Commands" block.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator


def subcommands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """Every (sub)command below `parser`, depth first: its words, its parser, its one-line help."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, child in action.choices.items():
            yield (*path, name), child, helps.get(name, "")
            yield from subcommands(child, (*path, name))


def leaf_commands(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """The commands that do something (not mere groups like `host`), with their one-line help."""
    found = []
    for path, child, text in subcommands(parser):
        if not any(isinstance(a, argparse._SubParsersAction) for a in child._actions):
            found.append(("metalflow " + " ".join(path), text))
    return found


def command_list(parser: argparse.ArgumentParser) -> str:
    """README's block: one line per command, the command padded, then its help."""
    rows = leaf_commands(parser)
    width = max(len(command) for command, _ in rows) + 2
    return "\n".join(f"{command.ljust(width)}{text}".rstrip() for command, text in rows)


if __name__ == "__main__":
    from metalflow.cli import build_parser

    print(command_list(build_parser()))
