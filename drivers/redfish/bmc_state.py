"""What the worker remembers about one BMC across activities, and how it authenticates.

One `BMCState` per BMC (per endpoint, System and auth: `RedfishClient.connect`), shared by every
connection to that BMC in the worker: the request slots that cap it, its one session, and what
was learnt once and is not asked again (the service root, the host's System, what `auto` chose,
the reset types refused as not implemented, the SessionTimeout).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

AuthMode = Literal["session", "basic", "auto"]


@dataclass
class Session:
    """A session the BMC created: its token, and where to touch and delete it (None: nowhere)."""

    token: str
    location: str | None


@dataclass
class BMCState:
    """What the worker shares about one BMC across activities."""

    slots: asyncio.Semaphore
    session_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    session: Session | None = None
    service_root: dict[str, Any] | None = None
    system_uri: str | None = None  # the host's System, stable for a BMC
    named_path_refused: bool = False  # the System's path the inventory names answered 404 here
    auth: Literal["session", "basic"] | None = None  # what `auto` chose for this BMC
    unsupported_resets: set[str] = field(default_factory=set)  # advertised, but refused as permanent
    last_request: float = 0.0  # monotonic time of the last request (session keep-alive)
    keepalive_seconds: float = 20.0  # a third of the BMC's SessionTimeout, at most 20 s
    session_timeout_known: bool = False  # SessionTimeout read (once per BMC per worker)
