"""Twilio's request signature (``X-Twilio-Signature``), computed and checked.

Twilio signs every webhook it sends: HMAC-SHA1, keyed by the account's auth
token, over the full URL it posted to followed by each POST parameter's name and
value with no separators, parameters sorted by name. The digest is sent base64
encoded. Herald's callback endpoint checks it before believing a status report;
the emulator uses the same function to sign the callbacks it sends, so both
sides of the test share one definition of "correctly signed".
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

Params = Mapping[str, str] | Iterable[tuple[str, str]]

_DEFAULT_PORTS = {"https": 443, "http": 80}


def compute_signature(auth_token: str, url: str, params: Params) -> str:
    """Return the base64 ``X-Twilio-Signature`` for a form POST to ``url``.

    Args:
        auth_token: The account's auth token; the HMAC key.
        url: The exact URL the request was sent to, query string included.
        params: The form parameters, as a mapping or as ``(name, value)`` pairs
            when a name repeats.

    Returns:
        The signature as Twilio sends it in the header.
    """
    pairs = list(params.items()) if isinstance(params, Mapping) else list(params)
    # Sorting by (name, value) keeps repeated names deterministic; Python's str
    # ordering is by code point, i.e. the case-sensitive byte order Twilio uses.
    pairs.sort()
    payload = url + "".join(name + value for name, value in pairs)
    digest = hmac.new(auth_token.encode("utf-8"), payload.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def is_valid_signature(auth_token: str, url: str, params: Params, signature: str | None) -> bool:
    """Whether ``signature`` is Twilio's signature for this URL and these parameters.

    Args:
        auth_token: The account's auth token.
        url: The URL as the receiver was addressed, query string included.
        params: The received form parameters (mapping or ``(name, value)`` pairs).
        signature: The received ``X-Twilio-Signature`` header; missing means invalid.

    Returns:
        True only on an exact match, compared in constant time.
    """
    if not signature:
        return False
    received = signature.encode("utf-8", "replace")
    # Every candidate is computed and compared, so the time taken does not tell which one matched.
    matches = [
        hmac.compare_digest(compute_signature(auth_token, candidate, params).encode("ascii"), received)
        for candidate in url_variants(url)
    ]
    return any(matches)


def url_variants(url: str) -> list[str]:
    """The URL as given, and with its scheme's default port written out or left out.

    Twilio may sign ``https://host/cb`` or ``https://host:443/cb`` for the same endpoint (load
    balancers and Twilio's own clients differ), and its RequestValidator accepts either spelling.
    Only the scheme's default port is added or removed: a URL on another port names another
    endpoint (Twilio's validator strips any port; we stay strict there).
    """
    parts = urlsplit(url)
    default = _DEFAULT_PORTS.get(parts.scheme.lower())
    if default is None or parts.hostname is None:
        return [url]
    try:
        port = parts.port
    except ValueError:  # a port that is not a number: the URL is compared as given, only
        return [url]
    host = parts.netloc.rpartition("@")[2]
    bare_host = host.rsplit(":", 1)[0] if port is not None else host
    userinfo = parts.netloc[: len(parts.netloc) - len(host)]
    if port is None:
        other = urlunsplit(parts._replace(netloc=f"{userinfo}{host}:{default}"))
    elif port == default:
        other = urlunsplit(parts._replace(netloc=f"{userinfo}{bare_host}"))
    else:
        return [url]
    return [url, other]
