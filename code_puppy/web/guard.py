"""Who may use the dashboard: the token (once in the query string, then an HttpOnly SameSite=Strict cookie, or an
`Authorization: Bearer` header), and for every request that changes something an Origin of the dashboard itself.

A pure ASGI middleware, so server-sent event streams pass through it untouched.
"""

from __future__ import annotations

import hmac
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE = "code_puppy_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
HARDENING = [
    # The page's own files only: nothing from the network, no inline script, and no other site may frame it.
    (b"content-security-policy", b"default-src 'self'; frame-ancestors 'none'; form-action 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),  # the first address carries the token
]


class TokenGuard:
    """Lets through the requests that carry the token; 401 for the others, 403 for a change from another origin."""

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def hardened(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HARDENING]}
            await send(message)

        await self._guard(scope, receive, hardened)

    async def _guard(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = dict(query).get("token")
        if given is not None and scope["method"] in SAFE_METHODS and self._matches(given):
            # The token leaves the address bar (and the history) at once: the cookie carries it from now on.
            rest = urlencode([(key, value) for key, value in query if key != "token"])
            location = scope["path"] + (f"?{rest}" if rest else "")
            cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
            await _respond(send, 303, "see the dashboard\n", [("location", location), ("set-cookie", cookie)])
            return
        bearer = headers.get("authorization", "")
        by_header = bearer.startswith("Bearer ") and self._matches(bearer.removeprefix("Bearer "))
        if not by_header and not self._matches(_cookie(headers.get("cookie", ""))):
            await _respond(send, 401, "code-puppy web: unauthorized: open the address `code-puppy web` printed\n")
            return
        if scope["method"] not in SAFE_METHODS and not _same_origin(headers, by_header=by_header):
            await _respond(send, 403, "code-puppy web: refused: this request did not come from the dashboard's page\n")
            return
        await self.app(scope, receive, send)

    def _matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())


def _cookie(header: str) -> str:
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(header)
    except Exception:  # a malformed Cookie header carries no token
        return ""
    morsel = cookies.get(COOKIE)
    return morsel.value if morsel is not None else ""


def _same_origin(headers: dict[str, str], *, by_header: bool) -> bool:
    """A browser sends Origin with every change it makes: it must be this server's own. A client that authenticates
    with the header (a script, never a page of another site: browsers add no such header on their own) may omit it."""
    origin = headers.get("origin")
    if origin is None:
        return by_header
    return origin in (f"http://{headers.get('host', '')}", f"https://{headers.get('host', '')}")


async def _respond(send: Send, status: int, text: str, extra: list[tuple[str, str]] | None = None) -> None:
    body = text.encode()
    headers: list[Any] = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    headers += [(key.encode(), value.encode()) for key, value in extra or []]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
