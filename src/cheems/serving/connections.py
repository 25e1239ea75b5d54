"""The reward server's HTTP connections: uvicorn's httptools protocol with each request's head
bounded in size and time, and a refusal's reason in the status line.

Bounds. uvicorn reads a request's head (request line and headers) for as long as the client
takes and however large it grows: it times out an idle connection between requests
(``timeout_keep_alive``, 5 s), nothing within one, and its httptools parser has no size limit
(``h11_max_incomplete_event_size`` bounds only the h11 parser). A client sending a header byte
a second would hold a connection for ever, and a 50 MB header would be read whole. Here a head
must be complete within ``timeout_s`` of its first byte (of the connection, for the first
request, so a connection that sends nothing is closed too) and within ``max_bytes``; otherwise
the server answers 408 or 431 (``{"error": {"message", "field": "headers"}}``), stops parsing,
and closes the connection ``LINGER_S`` seconds later, reading and dropping what still comes
meanwhile, so that the client reads the answer rather than a connection reset. Bytes are
counted per read from the socket: a head read together with the end of the previous request's
body (a pipelining client) counts those bytes too.

Reason phrases. ASGI has no field for the reason phrase, and uvicorn writes the standard one
(``422 Unprocessable Entity``), which is all some clients log (OpenRLHF: ``422,
message='Unprocessable Entity'``). A response carrying ``X-Cheems-Error`` (every refusal of
:mod:`cheems.serving.app`) gets that reason after the standard phrase: ``HTTP/1.1 422
Unprocessable Entity (query[0]: holds a lone surrogate ...)``. uvicorn writes a response's
status line and headers in one ``transport.write``; each connection's transport is wrapped so
that such a write is rewritten on its way out (:func:`with_reason_phrase`), every other write
passing untouched.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from cheems.serving.naming import named
from cheems.serving.contracts import REASON_HEADER, error_body, refusal_reason

__all__ = ["BoundedHttpProtocol", "HeadLimits", "LINGER_S", "bounded_protocol", "with_reason_phrase"]

LINGER_S = 2.0  # seconds a refused connection stays open (its input dropped) so the client reads the answer
_REASON_LINE = b"\r\n" + REASON_HEADER.encode() + b": "


@dataclass(frozen=True)
class HeadLimits:
    """The bounds of one request's head: ``max_bytes`` bytes, ``timeout_s`` seconds."""

    max_bytes: int = 64 << 10
    timeout_s: float = 10.0


def with_reason_phrase(data: bytes) -> bytes:
    """``data`` with the ``X-Cheems-Error`` header's text after its status line's phrase, when
    ``data`` is a response head holding that header; otherwise ``data`` unchanged."""
    if not data.startswith(b"HTTP/1."):
        return data
    end = data.find(b"\r\n\r\n")
    at = data.find(_REASON_LINE, 0, end + 2) if end >= 0 else -1
    if at < 0:
        return data
    start = at + len(_REASON_LINE)
    reason = data[start:data.find(b"\r\n", start)]
    first = data.find(b"\r\n")
    return data[:first].rstrip(b" ") + b" (" + reason + b")" + data[first:]


class _ReasonTransport:
    """A connection's transport whose writes pass through :func:`with_reason_phrase`."""

    def __init__(self, transport: asyncio.Transport):
        self._transport = transport

    def write(self, data: bytes) -> None:
        self._transport.write(with_reason_phrase(data))

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounded request heads and reasons in status lines (see
    the module docs). :func:`bounded_protocol` makes the subclass that sets ``limits`` and
    ``on_refusal(status, reason, seconds)``, called once per head refused."""

    limits = HeadLimits()
    on_refusal: Callable[[int, str, float], None] = staticmethod(lambda status, reason, seconds: None)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._head_began: float | None = None  # loop time the head being read began; None between heads
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._refused = False

    # -------------------------------------------------------------- uvicorn's protocol, extended
    def connection_made(self, transport) -> None:
        super().connection_made(_ReasonTransport(transport))
        self._begin_head()

    def connection_lost(self, exc) -> None:
        self._end_head()
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered already: what still comes is dropped until the connection closes
        super().data_received(data)
        if self._head_began is None or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > self.limits.max_bytes:
            self._refuse(431, f"larger than {self.limits.max_bytes} bytes ({named('max_header_bytes')})")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begin_head()

    def on_headers_complete(self) -> None:
        self._end_head()
        super().on_headers_complete()

    # -------------------------------------------------------------- the bounds
    def _begin_head(self) -> None:
        if self._head_began is not None:
            return
        self._head_began = self.loop.time()
        self._head_bytes = 0
        self._head_timer = self.loop.call_later(self.limits.timeout_s, self._head_late)

    def _end_head(self) -> None:
        self._head_began = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._answering():  # a pipelined head waits behind a response: its turn has not come
            self._head_timer = self.loop.call_later(self.limits.timeout_s, self._head_late)
            return
        self._refuse(408, f"the request head was not complete within {self.limits.timeout_s:g} s "
                     f"({named('header_timeout_s')})")

    def _answering(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` naming ``headers``, stop parsing, close after ``LINGER_S``."""
        seconds = self.loop.time() - self._head_began
        self._end_head()
        self._refused = True
        if self._answering():  # a pipelined head: end the connection once the response being written is done
            self.cycle.keep_alive = False
            self.flow.pause_reading()
        else:
            body = json.dumps(error_body(message, "headers")).encode()
            head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(body)}\r\nconnection: close\r\n{REASON_HEADER}: "
                    f"{refusal_reason(message, 'headers')}\r\n\r\n").encode()
            self.transport.write(head + body)
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self._linger = self.loop.call_later(LINGER_S, self.transport.close)
        self.on_refusal(status, refusal_reason(message, "headers"), seconds)


def bounded_protocol(limits: HeadLimits, on_refusal: Callable[[int, str, float], None]) -> type[BoundedHttpProtocol]:
    """The protocol class to give uvicorn (``Config(http=...)``): heads bounded by ``limits``,
    ``on_refusal(status, reason, seconds)`` called for each head refused."""
    return type("BoundedHttpProtocol", (BoundedHttpProtocol,), {"limits": limits,
                                                               "on_refusal": staticmethod(on_refusal)})
