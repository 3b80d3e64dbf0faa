"""The site file, validated as a whole: the one loader the worker, `metalflow host` and `bmc` share.

A site file is user input, so it is read strictly: an unknown key (a mistyped `credentails`), a
duplicate host id (the first entry would win and another machine's BMC be cycled), a DPU under
two hosts or twice under one, an unknown DPU model, an endpoint that is not an http(s) URL, a
bad `auth` or a credential reference with two sources or none are all refused, every problem at
once, one line each with its place in the file (`hosts[3].dpus[1].id: ...`), never a pydantic
dump. The keys the simulated site writes for itself (a BMC's `profile` and `group`, a DPU's
`firmware`, the site's `workloads`) are known and ignored.

`SiteFileCache` is the worker's view: it re-reads the file when it changed on disk and, when the
new content is invalid, logs the problems and keeps serving the last valid site, so an edit in
progress never sends an operation to the wrong BMC.

Cost per host: none at rest; a reload parses the whole file once (CPU linear in hosts), and a
lookup between changes costs one `stat` (and one read while the file is under 2 s old).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from contracts.errors import InvalidInput
from contracts.models.inventory import BMCAuth, CredentialRef, EnvCredentials, SecretRef
from contracts.secret_free import REDACTED

log = logging.getLogger("metalflow.site_file")
DPU_MODELS = ("BF3", "BF4")
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")  # an endpoint's scheme, kept when it is shown
RACY_NS = 2_000_000_000  # a file modified this recently is compared by content, not by stamp


class SiteFileError(InvalidInput):
    """The site file cannot be used; `problems` holds one line per problem, with its path."""

    def __init__(self, path: Path, problems: list[str], headline: str | None = None) -> None:
        self.path, self.problems = path, problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        self.headline = headline or f"the site file {path} is not valid ({count})"
        super().__init__("\n".join([self.headline, *(f"  {p}" for p in problems)]))

    def one_line(self) -> str:
        """The headline and every problem on one line (for a log line or a refusal to start)."""
        return self.headline + (": " + "; ".join(self.problems) if self.problems else "")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _StrictEnv(EnvCredentials):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _StrictSecret(SecretRef):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _StrictCredentials(CredentialRef):
    model_config = ConfigDict(extra="forbid", frozen=True)
    env: _StrictEnv | None = None
    secret: _StrictSecret | None = None


class SiteBMC(_Strict):
    endpoint: str
    credentials: _StrictCredentials
    insecure: bool = False
    ca_bundle: str | None = None
    auth: BMCAuth = "auto"
    system: str | None = None
    profile: str | None = None  # simulated site only: how its BMC behaves
    group: str | None = None  # simulated site only: BMCs of one group share a service

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.username is not None:
            raise ValueError(
                "a BMC endpoint holds no user or password (name them under `credentials`): "
                f"{_endpoint_shown(value)!r}"
            )
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"not an http(s) URL of a BMC (e.g. https://10.1.2.42): {_endpoint_shown(value)!r}"
            )
        return value


def _endpoint_shown(value: str) -> str:
    """An endpoint as a refusal echoes it (a log line, the CLI's stderr): whatever comes before
    its last `@` (a user, a password, in any shape) taken out, then cut to 80 characters (cut
    first, a long password would have lost its `@` and shown: attack 41a MEDIUM-7)."""
    head, at, rest = value.rpartition("@")
    if at:
        scheme = _SCHEME.match(head)
        value = f"{scheme.group(0) if scheme else ''}{REDACTED}@{rest}"
    return value[:80]


class SiteDPU(_Strict):
    id: str
    model: Literal["BF3", "BF4"] = "BF3"
    serial: str | None = None
    bmc: SiteBMC | None = None
    firmware: str | None = None  # simulated site only: the firmware it starts with


class SiteHost(_Strict):
    id: str
    groups: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    instance: str | None = None
    bmc: SiteBMC
    dpus: list[SiteDPU] = Field(default_factory=list)


class SiteVersionTargets(_Strict):
    """The versions the site declares as its targets (`host versions` shows which run them)."""

    bfb: str = ""
    flavor: str = ""
    dpu_firmware: str = ""
    dpu_bmc_firmware: str = ""
    host_bmc_firmware: str = ""


class CompatibilityRule(_Strict):
    """`bfb: NAME` needs `dpu_bmc_firmware` (and/or `dpu_firmware`) at least the version given:
    a campaign to that BFB refuses, before anything changes, a selected host whose DPU runs less.
    Versions compare by their numbers in order (`BF-24.10-24` < `BF-25.04-7`)."""

    bfb: str
    min_dpu_bmc_firmware: str = ""
    min_dpu_firmware: str = ""


class SiteVersions(_Strict):
    targets: SiteVersionTargets = SiteVersionTargets()
    rules: list[CompatibilityRule] = Field(default_factory=list)


class Site(_Strict):
    """A valid site file: host ids unique, every DPU under exactly one host."""

    name: str = "site"
    namespace: str | None = None
    versions: SiteVersions = SiteVersions()
    hosts: list[SiteHost] = Field(default_factory=list)
    workloads: list[Any] = Field(default_factory=list)  # simulated site only: Grove workloads

    # Hosts by id, built on first lookup: a campaign resolves every host of a 10,000-host site,
    # and a scan per host made that 10^8 steps (past the selection's 30 s timeout, every attempt).
    _by_id: dict[str, SiteHost] | None = PrivateAttr(default=None)
    # DPUs with a BMC of their own, by id: each power activity looks its BMC up (2 ms a scan at
    # 10,000 hosts).
    _dpu_bmcs: dict[str, SiteBMC] | None = PrivateAttr(default=None)

    def host(self, host_id: str) -> SiteHost | None:
        if self._by_id is None:
            self._by_id = {h.id: h for h in self.hosts}
        return self._by_id.get(host_id)

    def dpu_bmc(self, dpu_id: str) -> SiteBMC | None:
        """The BMC of the DPU with this id; None when no DPU of that id has one."""
        if self._dpu_bmcs is None:
            found: dict[str, SiteBMC] = {}
            for host in self.hosts:
                for dpu in host.dpus:
                    if dpu.bmc is not None:
                        found.setdefault(dpu.id, dpu.bmc)
            self._dpu_bmcs = found
        return self._dpu_bmcs.get(dpu_id)


def _where(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _problem(error: Any) -> str:
    # Pydantic reports a failed union/literal branch under a tag in `loc`; the path a person
    # wrote has none of those, so keep only keys and indices of the file.
    loc = tuple(p for p in error["loc"] if isinstance(p, int) or not p.startswith(("function-", "literal[")))
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{_where(loc)}: unknown key (a typo?)"
    if kind == "missing":
        return f"{_where(loc)}: missing"
    if kind == "literal_error" and loc and loc[-1] == "model":
        return f"{_where(loc)}: unknown DPU model {error['input']!r}: use one of {', '.join(DPU_MODELS)}"
    if kind == "literal_error":
        return f"{_where(loc)}: {error['input']!r} is not one of {error['ctx']['expected']}"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{_where(loc)}: {message}"


def _duplicates(data: Any) -> list[str]:
    """Duplicate host ids and DPUs listed twice, on the raw data (so they join the other problems)."""
    hosts = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(hosts, list):
        return []
    problems: list[str] = []
    host_at: dict[str, int] = {}
    dpu_at: dict[str, str] = {}
    # Every host id, later ones too, as a set: a scan per DPU was 10^8 steps at 10,000 hosts.
    host_ids = {h.get("id") for h in hosts if isinstance(h, dict) and isinstance(h.get("id"), str)}
    for i, host in enumerate(hosts):
        if not isinstance(host, dict):
            continue
        host_id = host.get("id")
        if isinstance(host_id, str):
            if host_id in host_at:
                first_at = host_at[host_id]
                problems.append(f"hosts[{i}].id: duplicate host id {host_id!r} (also hosts[{first_at}])")
            host_at.setdefault(host_id, i)
        dpus = host.get("dpus")
        for j, dpu in enumerate(dpus if isinstance(dpus, list) else []):
            dpu_id = dpu.get("id") if isinstance(dpu, dict) else None
            if not isinstance(dpu_id, str):
                continue
            here = f"hosts[{i}].dpus[{j}]"
            first = dpu_at.get(dpu_id)
            if first is not None and first.startswith(f"hosts[{i}]."):
                problems.append(f"{here}.id: DPU {dpu_id!r} is listed twice under this host (also {first})")
            elif first is not None:
                problems.append(f"{here}.id: DPU {dpu_id!r} is also under another host ({first})")
            elif dpu_id in host_ids:
                problems.append(f"{here}.id: DPU id {dpu_id!r} is also a host id")
            dpu_at.setdefault(dpu_id, here)
    return problems


def parse_site(path: Path, text: str) -> Site:
    """The site in `text` (the content of `path`), validated as a whole.

    Raises:
        SiteFileError: Every problem found, one line each.
    """
    try:
        # libyaml's loader where PyYAML has it: the pure-Python one took ~100 s for a 10,000-host
        # file on a loaded machine (the worker reads the file at start and whenever it changes).
        data = yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader, C or Python
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "malformed"
        raise SiteFileError(path, [], f"the site file {path} is not YAML{where}: {problem}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise SiteFileError(path, [], f"the site file {path} is not a mapping (name, namespace, hosts)")
    problems: list[str] = []
    site = None
    try:
        site = Site.model_validate(data)
    except ValidationError as err:
        problems = [_problem(e) for e in err.errors(include_url=False)]
    problems += _duplicates(data)
    if problems or site is None:
        raise SiteFileError(path, list(dict.fromkeys(problems)))
    return site


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise SiteFileError(path, [], f"cannot read the site file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise SiteFileError(path, [], f"the site file {path} is not UTF-8 text") from None


def load_site(path: Path) -> Site:
    """Read and validate the site file at `path` (see `parse_site`)."""
    return parse_site(path, _read(path))


class SiteFileCache:
    """The last valid site of one file, re-read when the file changes (the worker's view)."""

    _shared: ClassVar[dict[Path, SiteFileCache]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def shared(cls, path: Path) -> SiteFileCache:
        """This process's one cache of the file at `path`.

        The worker checks the file at start and its inventory serves every operation from it:
        one cache means one parse per process (a 10,000-host file takes 6 to 9 s to parse, which
        the first operation after a start paid a second time, bench/README.md).
        """
        key = Path(path).absolute()
        with cls._shared_lock:
            cache = cls._shared.get(key)
            if cache is None:
                cache = cls._shared[key] = cls(key)
            return cache

    def check(self) -> Site:
        """The site as the file says now; unlike `site`, an invalid file is refused even after
        a valid one (a worker starting must not serve a file that is broken now).

        Raises:
            SiteFileError: The file as it is now cannot be used.
        """
        site = self.site()
        with self._lock:
            if self._error is not None:
                raise self._error
        return site

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) last read
        self._text: str | None = None  # the content last parsed
        self._site: Site | None = None
        self._error: SiteFileError | None = None

    def site(self) -> Site:
        """The site as the file says now, or the last valid one while the file is invalid.

        Raises:
            SiteFileError: The file never was valid (or cannot be read and never was).
        """
        with self._lock:
            try:
                info = self.path.stat()
                stamp: tuple[int, int, int] | None = (info.st_ino, info.st_size, info.st_mtime_ns)
                # An edit of the same size within the clock's granularity keeps the stamp (git's
                # "racy clean" case): while the file is that young, compare its content too.
                young = time.time_ns() - info.st_mtime_ns < RACY_NS
            except OSError:
                stamp, young = None, False
            if stamp is None or stamp != self._seen or young:
                self._reload(stamp)
            if self._site is None:
                assert self._error is not None
                raise self._error
            return self._site

    def _reload(self, stamp: tuple[int, int, int] | None) -> None:
        try:
            text = _read(self.path)
            if text == self._text and stamp is not None:
                self._seen = stamp
                return
            self._text = text
            site = parse_site(self.path, text)
        except SiteFileError as err:
            if self._site is not None and (self._error is None or err.message != self._error.message):
                log.error("%s; keeping the last valid site file", err.one_line())
            self._error = err
            self._seen = stamp if stamp is not None else self._seen
            return
        if self._site is not None and site != self._site:
            log.info("site file %s changed: reloaded (%d hosts)", self.path, len(site.hosts))
        self._site, self._error, self._seen = site, None, stamp
