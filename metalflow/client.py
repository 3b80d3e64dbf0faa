"""The one way metalflow connects to Temporal: worker, CLI and tests all call `connect`.

Connection settings come from Temporal's environment configuration (`temporalio.envconfig`):
a TOML profile file (``TEMPORAL_CONFIG_FILE``, default ``~/.config/temporalio/temporal.toml``,
profile chosen by ``TEMPORAL_PROFILE``) overridden by ``TEMPORAL_ADDRESS``,
``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS``, ``TEMPORAL_TLS_CLIENT_CERT_PATH``,
``TEMPORAL_TLS_CLIENT_KEY_PATH``, ``TEMPORAL_TLS_SERVER_CA_CERT_PATH`` and the other
``TEMPORAL_*`` variables the Temporal CLI reads. Every client uses the pydantic data converter,
so workflow inputs and results are pydantic models end to end.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from temporalio.client import Client, Interceptor
from temporalio.envconfig import ClientConfigProfile, ClientConnectConfig
from temporalio.service import RPCError, RPCStatusCode

from contracts.converter import DATA_CONVERTER
from contracts.names import DEFAULT_NAMESPACE

DEFAULT_ADDRESS = "127.0.0.1:7233"


class TemporalConfigError(ValueError):
    """The Temporal config file that was named cannot be read or is not TOML; the message names it."""


def _named_config_file(config_file: Path | None, env: Mapping[str, str] | None) -> Path | None:
    """The config file given explicitly or by TEMPORAL_CONFIG_FILE, checked: envconfig would
    silently fall back to 127.0.0.1:7233 when it is missing or malformed, and a command would then
    act on whatever Temporal listens there."""
    named = config_file
    if named is None:
        value = (os.environ if env is None else env).get("TEMPORAL_CONFIG_FILE")
        named = Path(value) if value else None
    if named is None:
        return None
    try:
        tomllib.loads(named.read_text())
    except OSError as err:
        raise TemporalConfigError(
            f"cannot read the Temporal config file {named}: {err.strerror or err}"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise TemporalConfigError(f"the Temporal config file {named} is not valid TOML: {err}") from None
    return named


def load_connect_config(
    *,
    profile: str | None = None,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> ClientConnectConfig:
    """Resolve where and how to connect, from envconfig profile and ``TEMPORAL_*`` variables.

    Args:
        profile: Profile name in the config file; ``TEMPORAL_PROFILE`` or ``default`` when omitted.
        config_file: A specific TOML file instead of the default locations.
        env: The environment to read instead of the process environment (an empty mapping
            ignores the environment entirely).

    Returns:
        Keyword arguments for `Client.connect`, with metalflow's defaults filled in
        (address ``127.0.0.1:7233``, namespace ``default``).

    Raises:
        TemporalConfigError: The named config file (``config_file`` or ``TEMPORAL_CONFIG_FILE``)
            is missing, unreadable or not TOML; never a silent fallback to the default address.
    """
    named = _named_config_file(config_file, env)
    loaded = ClientConfigProfile.load(profile, config_source=named, override_env_vars=env)
    config = loaded.to_client_connect_config()
    config.setdefault("target_host", DEFAULT_ADDRESS)
    config.setdefault("namespace", DEFAULT_NAMESPACE)
    return config


async def connect(
    *,
    profile: str | None = None,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    interceptors: Sequence[Interceptor] = (),
    **overrides: Any,
) -> Client:
    """Connect a Temporal client with metalflow's data converter.

    Args:
        profile: See `load_connect_config`.
        config_file: See `load_connect_config`.
        env: See `load_connect_config`.
        interceptors: Client interceptors, e.g. the tracing from `metalflow.runtime.telemetry`.
        **overrides: Further `Client.connect` arguments; they win over the loaded config.

    Returns:
        A connected client.
    """
    config: dict[str, Any] = dict(load_connect_config(profile=profile, config_file=config_file, env=env))
    config.update(overrides)
    return await connect_with(config, interceptors=interceptors)


async def connect_with(config: Mapping[str, Any], *, interceptors: Sequence[Interceptor] = ()) -> Client:
    """Connect with exactly `config` (`Client.connect` keyword arguments) and metalflow's converter."""
    return await Client.connect(
        data_converter=DATA_CONVERTER,  # the pydantic converter, built once (contracts/converter.py)
        interceptors=list(interceptors),
        **config,
    )


_LOST = frozenset({RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED})


def no_worker_polls(err: RPCError) -> bool:
    """Whether Temporal refused a query because no worker polled the workflow's task queue lately
    (FAILED_PRECONDITION "no poller seen for task queue recently"): nobody can answer, which a
    command reports as it reports a workflow that does not answer (exit 3), never as a refusal."""
    return err.status == RPCStatusCode.FAILED_PRECONDITION and "no poller seen" in err.message


NO_WORKER = (
    "the workflow asked does not answer: no worker serves its task queue (Temporal: no poller seen "
    "recently). Nothing was changed: start a worker (python worker.py) and ask again"
)
"""A query no worker could answer where the command did not name the workflow itself (exit 3)."""


def temporal_lost(err: RPCError) -> bool:
    """Whether an RPC failed because Temporal went away (or never answered), not because it refused.

    A call in flight when the connection drops fails UNKNOWN with a transport error; the calls
    after it fail UNAVAILABLE. Both mean "lost Temporal" to a command's user (exit 3).
    """
    if err.status in _LOST:
        return True
    return err.status == RPCStatusCode.UNKNOWN and "transport error" in err.message.lower()
