"""metalflow.client's and the worker's configuration, without a server: envconfig from variables
and profiles (never a silent fallback to a local server), the trace exporter's errors, and one
site file cache shared by the worker's activities. (The worker running: tests/test_worker.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import activities
from metalflow.client import TemporalConfigError, load_connect_config
from metalflow.runtime.telemetry import TelemetryConfigError, setup_tracing


def test_envconfig_from_environment_variables() -> None:
    config = load_connect_config(
        env={
            "TEMPORAL_ADDRESS": "temporal.example:7233",
            "TEMPORAL_NAMESPACE": "fleet",
            "TEMPORAL_API_KEY": "k",
        }
    )
    assert config["target_host"] == "temporal.example:7233"
    assert config["namespace"] == "fleet"
    assert config["api_key"] == "k"
    assert config["tls"] is True  # an API key implies TLS, as the Temporal CLI does


def test_envconfig_profiles_from_file(tmp_path: Path) -> None:
    config_file = tmp_path / "temporal.toml"
    config_file.write_text(
        '[profile.default]\naddress = "a:1"\n\n[profile.prod]\naddress = "prod:7233"\nnamespace = "metal"\n'
    )
    assert load_connect_config(config_file=config_file, env={})["target_host"] == "a:1"
    prod = load_connect_config(config_file=config_file, env={"TEMPORAL_PROFILE": "prod"})
    assert (prod["target_host"], prod["namespace"]) == ("prod:7233", "metal")
    # Environment variables win over the file.
    overridden = load_connect_config(config_file=config_file, env={"TEMPORAL_ADDRESS": "env:9"})
    assert overridden["target_host"] == "env:9"


def test_envconfig_defaults_to_local_server(tmp_path: Path) -> None:
    empty = tmp_path / "temporal.toml"
    empty.write_text("")
    config = load_connect_config(env={}, config_file=empty)
    assert config["target_host"] == "127.0.0.1:7233" and config["namespace"] == "default"


def test_a_named_config_file_missing_or_malformed_is_an_error_naming_it(tmp_path: Path) -> None:
    """Never a silent fallback to 127.0.0.1:7233: a command would act on whatever listens there."""
    missing = tmp_path / "absent.toml"
    with pytest.raises(TemporalConfigError, match=f"cannot read the Temporal config file {missing}"):
        load_connect_config(env={"TEMPORAL_CONFIG_FILE": str(missing)})
    with pytest.raises(TemporalConfigError, match=f"cannot read the Temporal config file {missing}"):
        load_connect_config(env={}, config_file=missing)
    malformed = tmp_path / "bad.toml"
    malformed.write_text('[profile.default\naddress = "secret-host:7233"\n')
    with pytest.raises(TemporalConfigError, match=f"the Temporal config file {malformed} is not valid TOML"):
        load_connect_config(env={"TEMPORAL_CONFIG_FILE": str(malformed)})


def test_unknown_or_missing_trace_exporter_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TelemetryConfigError, match="OTEL_TRACES_EXPORTER 'zipkinish'"):
        setup_tracing({"OTEL_TRACES_EXPORTER": "zipkinish"})
    assert setup_tracing({}).interceptors == []
    assert setup_tracing({"OTEL_TRACES_EXPORTER": "none"}).interceptors == []
    # Whether or not this venv has the exporter, make it absent: a None entry makes import fail.
    for exporter in (
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    ):
        monkeypatch.setitem(sys.modules, exporter, None)
    with pytest.raises(TelemetryConfigError, match="opentelemetry-exporter-otlp"):
        setup_tracing({"OTEL_TRACES_EXPORTER": "otlp"})


def test_inventory_and_power_activities_share_one_site_file_cache(tmp_path: Path) -> None:
    """One parse of the site file per worker: at 10,000 hosts a second cache's first parse kept
    a power cycle from heartbeating until its attempt was timed out (bench/README.md)."""
    from drivers.settings import Settings

    built = activities.build_activities(settings=Settings(site_file=tmp_path / "site.yaml"))
    owners = {getattr(fn, "__name__", ""): getattr(fn, "__self__", None) for fn in built}
    resolve, power = owners["resolve_host_inventory"], owners["power_cycle_host"]
    assert power._inventory.site_file is resolve.inventory.site_file  # noqa: SLF001
