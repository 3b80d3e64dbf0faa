"""Words fit to show anywhere: a transient error's text with anything that looks like a secret
taken out (`secret_free`), before it goes into heartbeat details, a status or a terminal.

What a BMC error's words can hold (drivers/redfish/answers.py, wire.py): the BMC's id, the
method, the request's URL (its origin, path and query: a task monitor's link is the BMC's own,
and may carry a token in its query), the status, the BMC's own `error.message` and
ExtendedInfo messages (free text of the BMC's: a BMC may echo a header it refused), and an HTTP
library's exception text. metalflow never puts a credential there itself (the site file refuses
an endpoint with a user in it), but the BMC's words and links are not ours: anything shaped like
a credential is replaced by `[redacted]`, and the words are cut to `LIMIT` characters.
"""

from __future__ import annotations

import re
from typing import Final

LIMIT: Final = 300
REDACTED: Final = "[redacted]"

_NAMES = "authorization|x-auth-token|password|passwd|pwd|token|secret|api[-_]?key|session[-_]?id|cookie"
_SCHEMES = "Basic|Bearer|Digest|Negotiate"
_VALUE = rf"\"[^\"]*\"|'[^']*'|(?:(?:{_SCHEMES})\s+)?[^\s&;,]+"
_RULES: Final = (
    # `Authorization: Basic abc`, `X-Auth-Token=abc`, `"Password": "abc"`, `token=abc` (a query)
    (re.compile(rf"(\"?(?:{_NAMES})\"?\s*[:=]\s*)({_VALUE})", re.I), r"\1" + REDACTED),
    # a scheme's credentials on their own: `Basic dXNlcjpwdw==`, `Bearer eyJ...`
    (re.compile(rf"\b({_SCHEMES})\s+[A-Za-z0-9+/=._~-]{{6,}}", re.I), r"\1 " + REDACTED),
    # a URL with a user (and password) in it: `https://user:pw@host`
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^/@\s]+@", re.I), r"\1" + REDACTED + "@"),
)


def secret_free(text: str, limit: int = LIMIT) -> str:
    """`text` with every credential-shaped part replaced by `[redacted]`, cut to `limit`
    characters (`...` at the cut). Pure; idempotent."""
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
