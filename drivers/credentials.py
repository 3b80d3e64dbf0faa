"""Resolve a BMC's `CredentialRef` to a username and password, inside the activity only.

Workflow inputs, results and history carry the reference (`file`, `env` or `secret`), never the
values: the Temporal UI shows all of them. Every failure is `CredentialsUnavailable` naming the
reference (a path, variable names, a Secret's namespace/name) and never a value, so an error
message can be logged and shown safely.

Nothing is cached: a rotated password is picked up by the next activity.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.errors import CredentialsUnavailable
from contracts.models.inventory import CredentialRef, SecretRef


@dataclass(frozen=True)
class Credentials:
    """A username and password; `repr` hides the password so it never reaches a log line."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=<hidden>)"

    __str__ = __repr__


class CredentialResolver:
    """Resolves references; holds the kubeconfig path for `secret:` references.

    Args:
        kubeconfig: The kubeconfig to read Secrets with; None means in-cluster config when running
            in a pod, else the Kubernetes client's default (`~/.kube/config`).
        env: The environment to read `env:` references from (default: the process environment).
    """

    def __init__(self, kubeconfig: Path | None = None, env: Mapping[str, str] | None = None) -> None:
        self._kubeconfig = kubeconfig
        self._env = env

    async def resolve(self, ref: CredentialRef) -> Credentials:
        """The credentials a reference points at; `CredentialsUnavailable` when they cannot be read."""
        if ref.file is not None:
            return await asyncio.to_thread(_from_file, ref)
        if ref.env is not None:
            env = os.environ if self._env is None else self._env
            username, password = env.get(ref.env.username), env.get(ref.env.password)
            if not username or password is None:
                raise CredentialsUnavailable(f"credentials unavailable: {ref.describe()} are not both set")
            return Credentials(username, password)
        assert ref.secret is not None
        return await asyncio.to_thread(self._from_secret, ref, ref.secret)

    def _from_secret(self, ref: CredentialRef, secret: SecretRef) -> Credentials:
        # Imported here: the kubernetes package is slow to import and only `secret:` needs it.
        from kubernetes import client, config
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config.config_exception import ConfigException

        try:
            api_client = _kube_api_client(self._kubeconfig, config)
        except (ConfigException, OSError) as err:
            raise CredentialsUnavailable(
                f"credentials unavailable: cannot load the Kubernetes configuration to read "
                f"{ref.describe()}: {type(err).__name__}"
            ) from None
        try:
            with api_client:
                found = client.CoreV1Api(api_client).read_namespaced_secret(
                    secret.name, secret.namespace, _request_timeout=15
                )
        except ApiException as err:
            reason = (
                "it does not exist" if err.status == 404 else f"the API answered {err.status} {err.reason}"
            )
            raise CredentialsUnavailable(
                f"credentials unavailable: cannot read {ref.describe()}: {reason}"
            ) from None
        except Exception as err:  # connection errors of urllib3 come in many classes
            raise CredentialsUnavailable(
                f"credentials unavailable: cannot read {ref.describe()}: {type(err).__name__}"
            ) from None
        data: dict[str, Any] = found.data or {}
        values: dict[str, str] = {}
        for key in ("username", "password"):
            if key not in data:
                raise CredentialsUnavailable(f"credentials unavailable: {ref.describe()} has no key {key!r}")
            try:
                values[key] = base64.b64decode(data[key], validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise CredentialsUnavailable(
                    f"credentials unavailable: key {key!r} of {ref.describe()} is not base64 text"
                ) from None
        return Credentials(values["username"], values["password"])


def _kube_api_client(kubeconfig: Path | None, config: Any) -> Any:
    if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
        config.load_incluster_config()
        from kubernetes import client

        return client.ApiClient()
    return config.new_client_from_config(config_file=None if kubeconfig is None else str(kubeconfig))


def _from_file(ref: CredentialRef) -> Credentials:
    assert ref.file is not None
    try:
        loaded = json.loads(Path(ref.file).read_text())
    except OSError as err:
        raise CredentialsUnavailable(
            f"credentials unavailable: cannot read {ref.describe()}: {err.strerror}"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        # The decode error's message quotes the file's text: never pass it on.
        raise CredentialsUnavailable(f"credentials unavailable: {ref.describe()} is not JSON") from None
    if not isinstance(loaded, dict):
        raise CredentialsUnavailable(f"credentials unavailable: {ref.describe()} is not a JSON object")
    username, password = loaded.get("username"), loaded.get("password")
    if not isinstance(username, str) or not username or not isinstance(password, str):
        raise CredentialsUnavailable(
            f"credentials unavailable: {ref.describe()} lacks a text 'username' and 'password'"
        )
    return Credentials(username, password)
