"""The remote codec server: decrypts payloads for the Temporal Web UI and the `temporal` CLI.

    python -m herald.codec_server

Temporal holds only ciphertext (herald/payload_codec.py). The Web UI (started with
`--ui-codec-endpoint`) and the CLI (`--codec-endpoint`, `--codec-auth "Bearer <token>"`) send the
payloads they show here and display what comes back. Temporal's codec server protocol: ``POST
.../encode`` and ``POST .../decode``, only the last path segment counting (so the server may sit
under any prefix, a namespace segment included), a JSON body ``{"payloads": [{"metadata": {k:
base64}, "data": base64}]}`` answered in the same shape. Every request is answered by the first
rule that applies::

    a Host header not among the allowed hosts ........................ 421, before anything else
    CORS preflight (OPTIONS) from an allowed origin .................. 200, no token needed
    CORS preflight from any other origin ............................. 400
    a method other than POST ......................................... 405
    last path segment neither encode nor decode ...................... 404
    token configured, no `Authorization: Bearer <token>` ............. 401
    body larger than MAX_BODY_BYTES (read no further) ................ 413
    body not the Payloads JSON ....................................... 400
    a payload the keyring cannot decrypt (unknown key id, failed
      authentication) ................................................ 400 naming the key id
    otherwise ........................................................ 200, the payloads

The Web UI calls from the operator's browser, so its origin must be listed
(HERALD_CODEC_SERVER_CORS_ORIGINS). The UI forwards the operator's own access token only to an
https endpoint (its "pass access token" setting): on loopback the server runs without a token;
elsewhere set HERALD_CODEC_SERVER_TOKEN, or put an authenticating proxy in front. Whoever
reaches this server without a token sees recipients and bodies in plaintext.

It binds 127.0.0.1 unless HERALD_CODEC_SERVER_HOST says otherwise, and answers only requests
addressed to one of its own names (HERALD_CODEC_SERVER_ALLOWED_HOSTS; by default the host:port it
binds, 127.0.0.1:port and localhost:port). A loopback address does not stop the operator's own
browser: a page from a name the attacker points at 127.0.0.1 (DNS rebinding) is same-origin with
the server, so CORS lets it read the answers. Its requests carry that name in `Host`, and are
refused before a byte is decoded.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Sequence

import uvicorn
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from temporalio.api.common.v1 import Payloads
from temporalio.converter import PayloadCodec

from herald.http_bodies import read_bounded
from herald.payload_codec import CodecError
from herald.runtime import exits
from herald.runtime.process import ProcessRuntime
from herald.settings import load_settings

log = logging.getLogger("herald.codec_server")

# The Web UI decodes one event's payloads per request, the CLI one history's: kilobytes. 4 MiB
# holds a history of Temporal's 2 MiB payload limit twice over, and no body is read past it.
MAX_BODY_BYTES = 4 * 1024 * 1024
# What the UI and the CLI send (Temporal's ui/src/lib/services/data-encoder.ts).
_ALLOWED_HEADERS = ["Authorization", "Content-Type", "X-Namespace"]
# Names that reach only this machine, on any port: the default when an app is built without a list.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
HOST_REFUSED = "Host: must be one of the codec server's allowed hosts (HERALD_CODEC_SERVER_ALLOWED_HOSTS)"


def default_allowed_hosts(host: str, port: int) -> tuple[str, ...]:
    """The names a client on this machine reaches the server by: the address it binds, and loopback's."""
    bound = f"[{host}]" if ":" in host else host  # an IPv6 address is bracketed in Host
    return tuple(dict.fromkeys(f"{name}:{port}".lower() for name in (bound, "127.0.0.1", "localhost")))


def host_allowed(header: str, allowed: Sequence[str]) -> bool:
    """``header`` (a Host value) names an allowed host: an entry with a port matches exactly; one
    without, that name on any port or none."""
    given = header.strip().lower()
    for entry in allowed:
        if given == entry:
            return True
        if ":" not in entry.rsplit("]", 1)[-1] and given.startswith(entry + ":") and given[len(entry) + 1 :].isdigit():
            return True
    return False


class HostCheck:
    """ASGI middleware: a request whose Host is not allowed gets 421 and reaches nothing else."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        self._app = app
        self._allowed = tuple(host.lower() for host in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not host_allowed(Headers(scope=scope).get("host", ""), self._allowed):
            # The refused name is the caller's to choose: it stays out of the log.
            log.warning("refused a request addressed to a host outside HERALD_CODEC_SERVER_ALLOWED_HOSTS")
            await PlainTextResponse(HOST_REFUSED, status_code=421)(scope, receive, send)
            return
        await self._app(scope, receive, send)


class CodecEndpoint:
    """POST .../encode and .../decode through one codec, behind an optional bearer token."""

    def __init__(self, codec: PayloadCodec, token: str | None) -> None:
        self._codec = codec
        self._expected = f"Bearer {token}".encode() if token else None

    async def handle(self, request: Request) -> Response:
        operation = request.url.path.rstrip("/").rsplit("/", 1)[-1]
        if operation not in ("encode", "decode"):
            return PlainTextResponse("not found: the codec server answers .../encode and .../decode", status_code=404)
        if self._expected is not None:
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, self._expected):
                return PlainTextResponse("Authorization: a bearer token is required", status_code=401)
        body = await read_bounded(request, MAX_BODY_BYTES)
        if body is None:
            return PlainTextResponse(f"request body: larger than {MAX_BODY_BYTES} bytes (4 MiB)", status_code=413)
        try:
            payloads = json_format.Parse(body, Payloads(), ignore_unknown_fields=True)
        except (json_format.ParseError, UnicodeDecodeError):
            # The parser's message can quote the body; the rule is enough.
            return PlainTextResponse('request body: must be {"payloads": [...]}, Temporal\'s Payloads as JSON', status_code=400)
        try:
            if operation == "encode":
                converted = await self._codec.encode(payloads.payloads)
            else:
                converted = await self._codec.decode(payloads.payloads)
        except CodecError as error:
            log.warning("refused a %s request: %s", operation, error)
            return PlainTextResponse(str(error), status_code=400)
        return JSONResponse(json_format.MessageToDict(Payloads(payloads=converted)))


def create_codec_app(
    codec: PayloadCodec,
    *,
    token: str | None,
    cors_origins: Sequence[str],
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
) -> Starlette:
    endpoint = CodecEndpoint(codec, token)
    return Starlette(
        routes=[Route("/{path:path}", endpoint.handle, methods=["POST"])],
        middleware=[
            # Outermost of all: a rebound page's request gets no preflight answer, no 401, no decode.
            Middleware(HostCheck, allowed_hosts=allowed_hosts),
            # Outermost, so a preflight is answered before the token check (browsers send none with
            # it) and a 401 still carries the headers that let the UI read its status.
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["POST"],
                allow_headers=_ALLOWED_HEADERS,
                max_age=600,
            )
        ],
    )


def build_codec_server(runtime: ProcessRuntime) -> uvicorn.Server:
    """The uvicorn server from the process's settings; InvalidSetting names what is missing or wrong."""
    codec = runtime.payload_codec()
    server = runtime.settings().codec_server
    app = create_codec_app(
        codec,
        token=server.token.get_secret_value() if server.token else None,
        cors_origins=server.cors_origins,
        allowed_hosts=server.allowed_hosts or default_allowed_hosts(server.host, server.port),
    )
    return uvicorn.Server(uvicorn.Config(app, host=server.host, port=server.port, log_level="warning", access_log=False))


async def serve() -> None:
    server = build_codec_server(ProcessRuntime(load_settings()))
    log.info("codec server on http://%s:%d", server.config.host, server.config.port)
    await server.serve()  # a taken port: uvicorn logs it in one line and exits


def main() -> None:
    exits.serve(serve, database=None)


if __name__ == "__main__":
    main()
