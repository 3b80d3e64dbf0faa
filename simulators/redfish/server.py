"""The HTTP server of the BMCs: aiohttp's low-level server with its pure-Python request parser.

aiohttp's C parser answers 400 to an HTTP method it does not know (`FAKEMETHOD /redfish/v1/`)
before any handler runs; the Redfish protocol asks for 405 or 501, as real BMCs answer. The
pure-Python parser takes any method token, so BMC connections use it (the Kubernetes API of the
simulator keeps the C parser). Cost: the Python parser is slower per request; `make bench`
reports the BMCs' request rate with it.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.http_parser import HttpRequestParserPy
from aiohttp.web_protocol import RequestHandler, RequestPayloadError


class AnyMethodServer(web.Server):
    """A `web.Server` whose connections parse requests with aiohttp's pure-Python parser."""

    def __call__(self) -> RequestHandler:
        handler = super().__call__()
        try:
            handler._parser = HttpRequestParserPy(
                handler,
                self._loop,
                handler._read_bufsize,
                max_line_size=handler.max_line_size,
                max_field_size=handler.max_field_size,
                max_headers=handler.max_headers,
                payload_exception=RequestPayloadError,
                max_msg_queue_size=getattr(handler, "_max_msg_queue_size", 0),
            )
        except (AttributeError, TypeError):  # another aiohttp: keep its parser (400 to odd methods)
            pass
        return handler


def any_method_runner(handle: Any) -> web.ServerRunner:
    """A runner for `handle(request)` over `AnyMethodServer`."""
    return web.ServerRunner(AnyMethodServer(handle, handler_cancellation=True), access_log=None)


__all__ = ["AnyMethodServer", "any_method_runner"]
