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

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from temporalio.client import Client, Interceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfigProfile, ClientConnectConfig

from metalflow.names import DEFAULT_NAMESPACE

DEFAULT_ADDRESS = "127.0.0.1:7233"


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
    """
    loaded = ClientConfigProfile.load(profile, config_source=config_file, override_env_vars=env)
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
        interceptors: Client interceptors, e.g. the tracing from `metalflow.telemetry`.
        **overrides: Further `Client.connect` arguments; they win over the loaded config.

    Returns:
        A connected client.
    """
    config: dict[str, Any] = dict(load_connect_config(profile=profile, config_file=config_file, env=env))
    config.update(overrides)
    return await Client.connect(
        data_converter=pydantic_data_converter,
        interceptors=list(interceptors),
        **config,
    )
