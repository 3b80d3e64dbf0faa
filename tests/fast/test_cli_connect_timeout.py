"""`--connect-timeout SECONDS` / METALFLOW_CONNECT_TIMEOUT: how long each call of a command keeps
retrying a Temporal that does not answer (README, Commands). A bad value is refused naming the
option or the variable, before anything is asked; the option wins over the variable. (That the
window is the one the command keeps to, and that the default reaches a Temporal back within it:
tests/test_cli_temporal_gone.py.)"""

from __future__ import annotations

import pytest

from metalflow.cli import build_parser, connection
from metalflow.client import TemporalConfigError

ENV = {"TEMPORAL_ADDRESS": "127.0.0.1:7233"}  # no state dir probed


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf", "3601", ""])
def test_a_bad_option_value_is_a_usage_error_naming_the_option(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser("host").parse_args(["host", "list", "--connect-timeout", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--connect-timeout" in err and "number of seconds from 0.1 to 3600" in err


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "1e9"])
def test_a_bad_variable_value_is_refused_naming_the_variable(value: str) -> None:
    args = build_parser("host").parse_args(["host", "list"])
    with pytest.raises(TemporalConfigError, match=f"METALFLOW_CONNECT_TIMEOUT: {value!r} is not a number"):
        connection.resolve(args, env=ENV | {"METALFLOW_CONNECT_TIMEOUT": value})


def test_the_option_wins_over_the_variable_and_neither_keeps_the_sdks_default() -> None:
    parser = build_parser("campaign")
    given = parser.parse_args(["campaign", "list", "--connect-timeout", "0.5"])
    assert connection.resolve(given, env=ENV | {"METALFLOW_CONNECT_TIMEOUT": "abc"}).retry_seconds == 0.5
    plain = parser.parse_args(["campaign", "list"])
    assert connection.resolve(plain, env=ENV | {"METALFLOW_CONNECT_TIMEOUT": "2"}).retry_seconds == 2.0
    assert connection.resolve(plain, env=ENV).retry_seconds is None  # the SDK's RetryConfig()


def test_every_command_that_takes_address_takes_connect_timeout() -> None:
    from metalflow.cli.commands import subcommands

    missing = []
    for path, parser, _ in subcommands(build_parser()):
        options = {o for a in parser._actions for o in a.option_strings}
        if "--address" in options and "--connect-timeout" not in options:
            missing.append(" ".join(path))
    assert missing == []
