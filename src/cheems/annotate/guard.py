"""The ASGI middleware around every request of the annotation server: the body-size limit, the
security headers, one access-log line per request, and a last-resort 500 that keeps the
connection open.

The access log (logger ``cheems.annotate.access``, INFO) says method, path as sent (still
percent-encoded, so no decoded text can break the line), status, milliseconds and the id of the
user the request ran as (``-`` before login): never a header, a cookie, a token or a body.

An error no handler turned into a 4xx reaches :class:`Guard` as an exception. Left alone, it
would go on to the server, which answers 500 and closes the connection; here it is logged with
its traceback and answered as JSON ``{"detail", "field"}`` with the connection kept.
"""

from __future__ import annotations

import json
import logging
import time

__all__ = ["ACCESS_LOG", "MAX_BODY_BYTES", "SECURITY_HEADERS", "Guard"]

ACCESS_LOG = logging.getLogger("cheems.annotate.access")
_ERRORS = logging.getLogger("cheems.annotate.errors")
MAX_BODY_BYTES = 1 << 20  # an answer with notes is a few KiB
SECURITY_HEADERS = {
    # responses are rendered HTML from untrusted text: no inline script may ever run, and the
    # page loads nothing from elsewhere (images in responses included)
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_HEADERS = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]


class _TooLarge(Exception):
    """A body that grew past the limit while it was read (one sent without Content-Length)."""


class Guard:
    """Wraps the app: see the module docstring."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        sent = {"status": None}

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                sent["status"] = message["status"]
                message = dict(message, headers=[*message.get("headers", []), *_HEADERS])
            await send(message)

        try:
            if _declared_size(scope) > MAX_BODY_BYTES:
                await _refuse(send_with_headers, 413, f"body: larger than {MAX_BODY_BYTES // 1024} KiB", "body")
            else:
                await self.app(scope, _limited(receive), send_with_headers)
        except _TooLarge:
            if sent["status"] is not None:
                raise
            await _refuse(send_with_headers, 413, f"body: larger than {MAX_BODY_BYTES // 1024} KiB", "body")
        except Exception:
            if sent["status"] is not None:
                raise
            _ERRORS.exception("unhandled error in %s %s", scope.get("method"), _path(scope))
            await _refuse(send_with_headers, 500, "internal error (logged on the server)", None)
        finally:
            _log_access(scope, sent["status"], started)


def _declared_size(scope) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else MAX_BODY_BYTES + 1
    return 0


def _limited(receive):
    """``receive`` that raises _TooLarge once the body read so far passes the limit."""
    seen = 0

    async def wrapped():
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > MAX_BODY_BYTES:
                raise _TooLarge()
        return message

    return wrapped


async def _refuse(send, status: int, detail: str, field: str | None) -> None:
    body = json.dumps({"detail": detail, "field": field}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _path(scope) -> str:
    raw = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "backslashreplace")
    return raw.decode("ascii", "backslashreplace")


def _log_access(scope, status: int | None, started: float) -> None:
    if not ACCESS_LOG.isEnabledFor(logging.INFO):
        return
    user = (scope.get("state") or {}).get("user_id")
    ms = (time.perf_counter() - started) * 1000
    ACCESS_LOG.info("%s %s %s %.1fms user=%s", scope.get("method"), _path(scope), status or "-", ms,
                    "-" if user is None else user)
