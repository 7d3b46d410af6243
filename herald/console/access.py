"""Who may read the console: every request is let through by exactly one rule, or refused.

The console shows the ledger: which notices went to whom (by fingerprint), when and why. So nothing
is answered to a request that none of these lets in, checked in this order::

    a Host header not among the allowed hosts ........................... 421 (DNS rebinding)
    from a trusted proxy (HERALD_CONSOLE_TRUSTED_PROXIES), carrying the
      operator in HERALD_CONSOLE_AUTH_HEADER ............................ in, as that operator
    `Authorization: Bearer <HERALD_CONSOLE_TOKEN>` (compared in constant
      time) .............................................................. in, as "token"
    neither a token nor a proxy configured, from a loopback address ...... in, as "loopback"
    a token or a proxy configured, and neither let it in ................ 401
    otherwise (loopback only, from elsewhere) ............................ 403

The proxy's header is believed only from the proxies' own addresses, the TCP peer (uvicorn runs
with proxy headers off, so X-Forwarded-For cannot stand in for it): anyone else can send the header
too. Configuration that would leave a console beyond loopback with no rule is refused at load
(herald.settings.ConsoleSettings).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import re

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from herald.codec.server import default_allowed_hosts, host_allowed
from herald.core.outcomes import Frozen
from herald.settings import ConsoleSettings

log = logging.getLogger("herald.console")

# What a proxy may name an operator: one printable line, as single sign-on systems send (an e-mail
# address, a user name). Anything else is refused rather than shown.
_OPERATOR = re.compile(r"[^\x00-\x1f\x7f]{1,200}")
HOST_REFUSED = "Host: must be one of the console's allowed hosts (HERALD_CONSOLE_ALLOWED_HOSTS)"


class Admitted(Frozen):
    operator: str  # who the page says it is showing the ledger to


class Refused(Frozen):
    status: int
    reason: str  # names the header and the rule, never what was sent


class AccessRules(Frozen):
    """The console's access rules, as the settings give them."""

    token: str | None = None
    auth_header: str | None = None
    trusted_proxies: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...]

    @classmethod
    def of(cls, settings: ConsoleSettings) -> AccessRules:
        return cls(
            token=settings.token.get_secret_value() if settings.token else None,
            auth_header=settings.auth_header,
            trusted_proxies=settings.trusted_proxies,
            allowed_hosts=settings.allowed_hosts or default_allowed_hosts(settings.host, settings.port),
        )


def _address(peer: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The peer's address; an IPv4 peer of a dual-stack socket (::ffff:10.0.0.5) as the IPv4 address."""
    try:
        address = ipaddress.ip_address(peer or "")
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def decide(rules: AccessRules, peer: str | None, headers: Headers) -> Admitted | Refused:
    """The rule that lets this request in, or the refusal (`peer`: the TCP peer's address)."""
    if not host_allowed(headers.get("host", ""), rules.allowed_hosts):
        return Refused(status=421, reason=HOST_REFUSED)
    address = _address(peer)
    if rules.auth_header is not None and address is not None:
        if any(address in ipaddress.ip_network(proxy) for proxy in rules.trusted_proxies):
            operator = headers.get(rules.auth_header, "").strip()
            if _OPERATOR.fullmatch(operator):
                return Admitted(operator=operator)
    if rules.token is not None:
        given = headers.get("authorization", "").encode()
        if hmac.compare_digest(given, f"Bearer {rules.token}".encode()):
            return Admitted(operator="token")
    if rules.token is None and rules.auth_header is None:
        if address is not None and address.is_loopback:
            return Admitted(operator="loopback")
        return Refused(status=403, reason="the console answers this machine only (loopback)")
    wanted = [
        *(["Authorization: Bearer <HERALD_CONSOLE_TOKEN>"] if rules.token is not None else []),
        *([f"{rules.auth_header} from a trusted proxy"] if rules.auth_header is not None else []),
    ]
    return Refused(status=401, reason="sign in first: " + " or ".join(wanted))


class AccessGate:
    """ASGI middleware: a request no rule lets in is answered with its refusal and reaches nothing
    else; one let in carries its operator in ``scope["state"]["operator"]``."""

    def __init__(self, app: ASGIApp, rules: AccessRules) -> None:
        self._app = app
        self._rules = rules

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        client = scope.get("client")
        verdict = decide(self._rules, client[0] if client else None, Headers(scope=scope))
        if isinstance(verdict, Refused):
            # What was sent (a token, a name) stays out of the log: the status says which rule.
            log.warning("refused a console request (%s)", verdict.status)
            headers = {"WWW-Authenticate": 'Bearer realm="herald-console"'} if verdict.status == 401 else None
            await PlainTextResponse(verdict.reason, status_code=verdict.status, headers=headers)(scope, receive, send)
            return
        scope.setdefault("state", {})["operator"] = verdict.operator
        await self._app(scope, receive, send)
