"""The codec server's HTTP contract, driven in process through httpx's ASGITransport."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator

import httpx
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from devstack.processes import free_port
from herald.codec_server import (
    HOST_REFUSED,
    MAX_BODY_BYTES,
    build_codec_server,
    create_codec_app,
    default_allowed_hosts,
    host_allowed,
)
from herald.payload_codec import EncryptionCodec
from herald.runtime.process import ProcessRuntime
from herald.settings import InvalidSetting, load_settings

KEY = os.urandom(32)
TOKEN = "operator-token"
UI = "http://127.0.0.1:8233"
RECIPIENT = "+15557654321"


def _body(*payloads: Payload) -> dict:
    return json_format.MessageToDict(Payloads(payloads=payloads))


def _plain() -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=f'"{RECIPIENT}"'.encode())


@pytest.fixture
async def codec_http() -> AsyncIterator[httpx.AsyncClient]:
    app = create_codec_app(
        EncryptionCodec({"k1": KEY}, "k1"), token=TOKEN, cors_origins=[UI], allowed_hosts=default_allowed_hosts("127.0.0.1", 8238)
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8238") as client:
        yield client


AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_encode_then_decode_gives_the_payloads_back(codec_http: httpx.AsyncClient) -> None:
    """/encode answers ciphertext without the recipient; /decode of that answer gives the original payloads."""
    encoded = await codec_http.post("/encode", json=_body(_plain()), headers=AUTH)
    assert encoded.status_code == 200 and RECIPIENT not in encoded.text
    decoded = await codec_http.post("/decode", json=encoded.json(), headers=AUTH)
    assert decoded.status_code == 200
    assert list(json_format.ParseDict(decoded.json(), Payloads()).payloads) == [_plain()]


async def test_only_the_last_path_segment_counts(codec_http: httpx.AsyncClient) -> None:
    """Mounted under a prefix or a namespace segment, .../decode still decodes, as the protocol asks."""
    encoded = (await codec_http.post("/encode", json=_body(_plain()), headers=AUTH)).json()
    decoded = await codec_http.post("/codec/default/decode", json=encoded, headers=AUTH)
    assert decoded.status_code == 200 and base64.b64encode(f'"{RECIPIENT}"'.encode()).decode() in decoded.text
    assert (await codec_http.post("/other", json=encoded, headers=AUTH)).status_code == 404
    assert (await codec_http.get("/decode", headers=AUTH)).status_code == 405


async def test_without_the_token_nothing_is_decoded(codec_http: httpx.AsyncClient) -> None:
    """No or a wrong bearer token is 401, and the answer carries no payload."""
    encoded = (await codec_http.post("/encode", json=_body(_plain()), headers=AUTH)).json()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        refused = await codec_http.post("/decode", json=encoded, headers=headers)
        assert refused.status_code == 401 and RECIPIENT not in refused.text


async def test_the_web_ui_origin_passes_the_cors_preflight_and_others_do_not(codec_http: httpx.AsyncClient) -> None:
    """The UI's preflight (no token, as browsers send it) is allowed with its headers; another origin is refused."""
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type,x-namespace,authorization"}
    allowed = await codec_http.options("/decode", headers={"Origin": UI, **preflight})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == UI
    assert "X-Namespace" in allowed.headers["access-control-allow-headers"]
    refused = await codec_http.options("/decode", headers={"Origin": "http://evil.example", **preflight})
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
    # A 401 still carries the CORS header, so the UI can read why it failed.
    unauthorised = await codec_http.post("/decode", json=_body(), headers={"Origin": UI})
    assert unauthorised.status_code == 401 and unauthorised.headers["access-control-allow-origin"] == UI


async def test_a_body_over_the_limit_is_refused_413(codec_http: httpx.AsyncClient) -> None:
    """More than MAX_BODY_BYTES is refused before it is parsed."""
    response = await codec_http.post("/decode", content=b"x" * (MAX_BODY_BYTES + 1), headers=AUTH)
    assert response.status_code == 413


async def test_a_malformed_body_or_an_unknown_key_is_400_naming_the_rule(codec_http: httpx.AsyncClient) -> None:
    """Not Payloads JSON: 400 with the expected shape; a payload under a key this server lacks: 400 naming the key id."""
    malformed = await codec_http.post("/decode", content=b'{"payloads": "x"}', headers=AUTH)
    assert malformed.status_code == 400 and "Payloads as JSON" in malformed.text
    [foreign] = await EncryptionCodec({"elsewhere": os.urandom(32)}, "elsewhere").encode([_plain()])
    unknown = await codec_http.post("/decode", json=_body(foreign), headers=AUTH)
    assert unknown.status_code == 400 and "'elsewhere'" in unknown.text and RECIPIENT not in unknown.text


def test_the_server_refuses_to_start_without_a_key() -> None:
    """No key configured: one line naming the variable, instead of a server that cannot decrypt anything."""
    with pytest.raises(InvalidSetting) as refused:
        build_codec_server(ProcessRuntime(load_settings({})))
    assert str(refused.value).startswith("HERALD_CODEC_KEYS: no key configured")


async def test_a_request_for_another_host_is_refused_421_before_anything_is_decoded(codec_http: httpx.AsyncClient) -> None:
    """A rebound page's request (right address, its own name in Host) gets 421 naming the rule, token or not."""
    encoded = (await codec_http.post("/encode", json=_body(_plain()), headers=AUTH)).json()
    for host in ("rebind.attacker.example:8238", "127.0.0.1:9999", "localhost", ""):
        refused = await codec_http.post("/decode", json=encoded, headers={**AUTH, "Host": host})
        assert refused.status_code == 421 and refused.text == HOST_REFUSED and RECIPIENT not in refused.text
    preflight = {"Origin": UI, "Access-Control-Request-Method": "POST", "Host": "rebind.attacker.example:8238"}
    assert (await codec_http.options("/decode", headers=preflight)).status_code == 421
    for host in ("localhost:8238", "LOCALHOST:8238", "127.0.0.1:8238"):
        assert (await codec_http.post("/decode", json=encoded, headers={**AUTH, "Host": host})).status_code == 200


def test_the_default_hosts_are_the_bound_address_and_loopback_names_on_its_port() -> None:
    """Unconfigured, the allowed hosts are host:port as bound plus 127.0.0.1 and localhost on that port."""
    assert default_allowed_hosts("127.0.0.1", 8238) == ("127.0.0.1:8238", "localhost:8238")
    assert default_allowed_hosts("codec.internal", 9000) == ("codec.internal:9000", "127.0.0.1:9000", "localhost:9000")
    assert default_allowed_hosts("::1", 9000) == ("[::1]:9000", "127.0.0.1:9000", "localhost:9000")


@pytest.mark.parametrize(
    ("header", "allowed"),
    [
        ("codec.example.com", True),
        ("codec.example.com:443", True),
        ("Codec.Example.com:8443", True),
        ("codec.example.com.attacker.example", False),
        ("codec.example.com:443@attacker.example", False),
        ("evil-codec.example.com", False),
        ("[::1]:8238", True),
        ("127.0.0.1:8238", True),
        ("127.0.0.1:8239", False),
        ("127.0.0.1", False),
    ],
)
def test_an_entry_without_a_port_allows_any_port_and_one_with_a_port_only_that(header: str, allowed: bool) -> None:
    """`codec.example.com` admits that name on any port; `127.0.0.1:8238` admits exactly that; nothing else passes."""
    assert host_allowed(header, ["codec.example.com", "[::1]", "127.0.0.1:8238"]) is allowed


async def test_the_server_binds_loopback_and_an_allowed_hosts_list_replaces_the_default() -> None:
    """Built from settings it binds 127.0.0.1; HERALD_CODEC_SERVER_ALLOWED_HOSTS, when set, is the whole list."""
    keys = f"k1:{base64.b64encode(KEY).decode()}"
    server = build_codec_server(ProcessRuntime(load_settings({"HERALD_CODEC_KEYS": keys})))
    assert server.config.host == "127.0.0.1"
    proxied = build_codec_server(
        ProcessRuntime(
            load_settings({"HERALD_CODEC_KEYS": keys, "HERALD_CODEC_SERVER_ALLOWED_HOSTS": "codec.example.com"})
        )
    )
    for built, host, status in [
        (server, "127.0.0.1:8238", 200),
        (server, "codec.example.com", 421),
        (proxied, "codec.example.com", 200),
        (proxied, "127.0.0.1:8238", 421),
    ]:
        transport = httpx.ASGITransport(app=built.config.app)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as client:
            assert (await client.post("/encode", json=_body(_plain()))).status_code == status, host


async def test_a_real_server_refuses_a_rebound_name_on_its_own_address() -> None:
    """Over a real socket on 127.0.0.1, a request naming another host in Host is refused 421; its own name passes."""
    port = free_port()
    env = {"HERALD_CODEC_KEYS": f"k1:{base64.b64encode(KEY).decode()}", "HERALD_CODEC_SERVER_PORT": str(port)}
    server = build_codec_server(ProcessRuntime(load_settings(env)))
    serving = asyncio.create_task(server.serve())
    try:
        for _ in range(250):
            if server.started:
                break
            await asyncio.sleep(0.02)
        assert server.started, "codec server did not start"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            rebound = await client.post("/encode", json=_body(_plain()), headers={"Host": f"rebind.attacker.example:{port}"})
            own = await client.post("/encode", json=_body(_plain()))
        assert rebound.status_code == 421 and rebound.text == HOST_REFUSED
        assert own.status_code == 200
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=10)
