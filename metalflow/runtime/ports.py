"""Check ports before starting anything, so a busy port is a clear error and not a crash log."""

from __future__ import annotations

import errno
import socket


class PortInUseError(RuntimeError):
    """A port the stack needs is taken; the message names the port and the flag that changes it."""


def ensure_free(host: str, port: int, purpose: str, flag: str) -> None:
    """Fail when ``host:port`` cannot be bound.

    Args:
        host: The address the server will bind (always 127.0.0.1 here).
        port: The port to check.
        purpose: What would listen there, for the message ("Temporal gRPC").
        flag: The command-line flag that picks another port.

    Raises:
        PortInUseError: The port is already in use.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR ignores connections lingering in TIME_WAIT, which a restarted server
        # can bind over; a live listener (on this address or 0.0.0.0) still makes bind fail.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise
            raise PortInUseError(
                f"port {port} on {host} ({purpose}) is already in use; stop what uses it or "
                f"choose another port with {flag} PORT"
            ) from None


def free_port(host: str = "127.0.0.1") -> int:
    """Return a port that is free right now on ``host`` (for tests and ``--port 0``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port
