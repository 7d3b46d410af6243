"""The codec server's HTTP contract, driven in process through httpx's ASGITransport."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator

import httpx
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from herald.codec_server import MAX_BODY_BYTES, build_codec_server, create_codec_app
from herald.payload_codec import EncryptionCodec
from herald.settings import InvalidSetting

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
    app = create_codec_app(EncryptionCodec({"k1": KEY}, "k1"), token=TOKEN, cors_origins=[UI])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://codec") as client:
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
        build_codec_server({})
    assert str(refused.value).startswith("HERALD_CODEC_KEYS: no key configured")
