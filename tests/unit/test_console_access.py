"""Who the console lets in: one rule per request, or a refusal naming what is missing (herald/console/access.py)."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from herald.console.access import AccessRules, Admitted, Refused, decide
from herald.settings import ConsoleSettings, InvalidSetting, load_settings

HOST = {"host": "127.0.0.1:8240"}
LOOPBACK = AccessRules.of(ConsoleSettings())
TOKEN = AccessRules.of(ConsoleSettings(token="s3cret-token"))
PROXY = AccessRules.of(
    ConsoleSettings(
        auth_header="x-forwarded-user",
        trusted_proxies=("10.0.0.5/32", "fd00::/64"),
        allowed_hosts=("console.internal",),
    )
)
BOTH = AccessRules.of(
    ConsoleSettings(token="s3cret-token", auth_header="x-forwarded-user", trusted_proxies=("10.0.0.5/32",))
)


@pytest.mark.parametrize(
    ("rules", "peer", "headers", "verdict"),
    [
        # Loopback only: this machine, nobody else, whatever they send.
        (LOOPBACK, "127.0.0.1", HOST, Admitted(operator="loopback")),
        (LOOPBACK, "::1", HOST, Admitted(operator="loopback")),
        (LOOPBACK, "::ffff:127.0.0.1", HOST, Admitted(operator="loopback")),
        (LOOPBACK, "10.0.0.9", HOST, 403),
        (LOOPBACK, None, HOST, 403),
        (LOOPBACK, "10.0.0.9", {**HOST, "authorization": "Bearer anything"}, 403),
        # A token: the exact bearer header, from anywhere; loopback is no longer enough.
        (TOKEN, "10.0.0.9", {**HOST, "authorization": "Bearer s3cret-token"}, Admitted(operator="token")),
        (TOKEN, "127.0.0.1", HOST, 401),
        (TOKEN, "10.0.0.9", {**HOST, "authorization": "Bearer s3cret-tokeN"}, 401),
        (TOKEN, "10.0.0.9", {**HOST, "authorization": "s3cret-token"}, 401),
        (TOKEN, "10.0.0.9", {**HOST, "authorization": "Bearer s3cret-token "}, 401),
        # A proxy: its header believed from its own addresses only.
        (
            PROXY,
            "10.0.0.5",
            {"host": "console.internal", "x-forwarded-user": "ops@example.com"},
            Admitted(operator="ops@example.com"),
        ),
        (PROXY, "::ffff:10.0.0.5", {"host": "console.internal", "x-forwarded-user": "ops"}, Admitted(operator="ops")),
        (PROXY, "fd00::7", {"host": "console.internal", "x-forwarded-user": "ops"}, Admitted(operator="ops")),
        (PROXY, "10.0.0.6", {"host": "console.internal", "x-forwarded-user": "ops@example.com"}, 401),
        (PROXY, "127.0.0.1", {"host": "console.internal", "x-forwarded-user": "ops@example.com"}, 401),
        (PROXY, "10.0.0.5", {"host": "console.internal"}, 401),
        (PROXY, "10.0.0.5", {"host": "console.internal", "x-forwarded-user": "   "}, 401),
        (PROXY, "10.0.0.5", {"host": "console.internal", "x-forwarded-user": "a\x7fb"}, 401),
        # Both: either one lets in.
        (BOTH, "10.0.0.5", {**HOST, "x-forwarded-user": "ops"}, Admitted(operator="ops")),
        (BOTH, "10.0.0.9", {**HOST, "authorization": "Bearer s3cret-token"}, Admitted(operator="token")),
        (BOTH, "10.0.0.9", {**HOST, "x-forwarded-user": "ops"}, 401),
        # A name the console is not called by (DNS rebinding) is refused before anything else.
        (LOOPBACK, "127.0.0.1", {"host": "attacker.example:8240"}, 421),
        (LOOPBACK, "127.0.0.1", {"host": "localhost:8240"}, Admitted(operator="loopback")),
        (LOOPBACK, "127.0.0.1", {}, 421),
        (PROXY, "10.0.0.5", {"host": "127.0.0.1:8240", "x-forwarded-user": "ops"}, 421),
        (TOKEN, "10.0.0.9", {"host": "evil.example", "authorization": "Bearer s3cret-token"}, 421),
    ],
)
def test_each_request_is_let_in_by_one_rule_or_refused(
    rules: AccessRules, peer: str | None, headers: dict[str, str], verdict: Admitted | int
) -> None:
    """Loopback alone without credentials configured; otherwise the token or a trusted proxy's header; the Host first."""
    found = decide(rules, peer, Headers(headers))
    if isinstance(verdict, Admitted):
        assert found == verdict
    else:
        assert isinstance(found, Refused) and found.status == verdict


def test_a_refusal_says_what_would_let_the_request_in_and_never_what_was_sent() -> None:
    """A 401 names the bearer header and the proxy header; the token or name sent is not in it."""
    found = decide(
        BOTH, "10.0.0.9", Headers({**HOST, "authorization": "Bearer guess-123", "x-forwarded-user": "mallory"})
    )
    assert isinstance(found, Refused)
    assert (
        found.reason
        == "sign in first: Authorization: Bearer <HERALD_CONSOLE_TOKEN> or x-forwarded-user from a trusted proxy"
    )
    assert "guess-123" not in found.reason and "mallory" not in found.reason


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        ({"HERALD_CONSOLE_HOST": "0.0.0.0"}, "HERALD_CONSOLE_HOST: beyond loopback, set HERALD_CONSOLE_TOKEN"),
        ({"HERALD_CONSOLE_HOST": "console.internal"}, "HERALD_CONSOLE_HOST: beyond loopback"),
        (
            {"HERALD_CONSOLE_AUTH_HEADER": "X-User"},
            "HERALD_CONSOLE_TRUSTED_PROXIES: required when HERALD_CONSOLE_AUTH_HEADER is set",
        ),
        (
            {"HERALD_CONSOLE_TRUSTED_PROXIES": "10.0.0.5"},
            "HERALD_CONSOLE_AUTH_HEADER: required when HERALD_CONSOLE_TRUSTED_PROXIES is set",
        ),
    ],
)
def test_a_console_that_would_answer_anyone_is_refused_at_load(env: dict[str, str], refused: str) -> None:
    """Beyond loopback without a token or a proxy, or half a proxy rule, is one line naming the variable."""
    with pytest.raises(InvalidSetting) as raised:
        load_settings(env)
    assert str(raised.value).startswith(refused)


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"HERALD_CONSOLE_HOST": "localhost"},
        {"HERALD_CONSOLE_HOST": "0.0.0.0", "HERALD_CONSOLE_TOKEN": "t0ken"},
        {
            "HERALD_CONSOLE_HOST": "::",
            "HERALD_CONSOLE_AUTH_HEADER": "X-Forwarded-User",
            "HERALD_CONSOLE_TRUSTED_PROXIES": "10.0.0.0/8",
        },
    ],
)
def test_a_console_with_a_rule_for_everyone_it_can_reach_loads(env: dict[str, str]) -> None:
    """Loopback alone, or beyond it with a token or a proxy's header, is a console the settings accept."""
    assert load_settings(env).console is not None
