"""SendGrid's Signed Event Webhook check, against the test vector SendGrid publishes in its Python library."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives import serialization

from herald.providers.sendgrid_signature import (
    is_valid_signature,
    load_public_key,
    new_private_key,
    public_key_text,
    sign,
)

# The vector of sendgrid-python's test/unit/test_eventwebhook.py: key, signature, timestamp and the
# exact payload bytes it signs (compact JSON with sorted keys, then CRLF).
PUBLIC_KEY = (
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g=="
)
SIGNATURE = "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM="
TIMESTAMP = "1600112502"
PAYLOAD = (
    json.dumps(
        [
            {
                "email": "hello@world.com",
                "event": "dropped",
                "reason": "Bounced Address",
                "sg_event_id": "ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA",
                "sg_message_id": "LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0",
                "smtp-id": "<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>",
                "timestamp": 1600112492,
            }
        ],
        sort_keys=True,
        separators=(",", ":"),
    )
    + "\r\n"
).encode()
OTHER_KEY = (
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEqTxd43gyp8IOEto2LdIfjRQrIbsd4SXZkLW6jDutdhXSJCWHw8REntlo7aNDthvj+y7GjUuFDb/R1NGe1OPzpA=="
)


def test_published_vector_verifies() -> None:
    """SendGrid's own signed request verifies under its key."""
    assert is_valid_signature(load_public_key(PUBLIC_KEY), PAYLOAD, SIGNATURE, TIMESTAMP)


@pytest.mark.parametrize(
    ("key", "payload", "signature", "timestamp"),
    [
        pytest.param(OTHER_KEY, PAYLOAD, SIGNATURE, TIMESTAMP, id="another-key"),
        pytest.param(PUBLIC_KEY, b"payload", SIGNATURE, TIMESTAMP, id="another-body"),
        pytest.param(PUBLIC_KEY, PAYLOAD.rstrip(), SIGNATURE, TIMESTAMP, id="body-without-its-crlf"),
        pytest.param(PUBLIC_KEY, PAYLOAD, SIGNATURE, "1600112503", id="another-timestamp"),
        pytest.param(PUBLIC_KEY, PAYLOAD, SIGNATURE, "timestamp", id="timestamp-not-digits"),
        pytest.param(PUBLIC_KEY, PAYLOAD, "not base64!", TIMESTAMP, id="signature-not-base64"),
        pytest.param(PUBLIC_KEY, PAYLOAD, "", TIMESTAMP, id="empty-signature"),
        pytest.param(PUBLIC_KEY, PAYLOAD, SIGNATURE, "١٦٠٠١١٢٥٠٢", id="non-ascii-timestamp"),
    ],
)
def test_anything_else_is_refused(key: str, payload: bytes, signature: str, timestamp: str) -> None:
    """Another key, body, timestamp or a malformed signature is refused without an exception."""
    assert not is_valid_signature(load_public_key(key), payload, signature, timestamp)


@pytest.mark.parametrize("value", ["", "not a key", "QUJD", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"])
def test_a_malformed_verification_key_is_a_value_error(value: str) -> None:
    """A verification key that is not a P-256 public key is refused at load, naming what it must be."""
    with pytest.raises(ValueError, match="public key"):
        load_public_key(value)


def test_sign_round_trips_with_a_fresh_key_pair() -> None:
    """What the local ESP emulator signs verifies under the key it publishes, in DER and in PEM form."""
    private = new_private_key()
    signature = sign(private, b'[{"event":"delivered"}]\r\n', "1700000000")
    pem = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for key in (load_public_key(public_key_text(private)), load_public_key(pem.decode())):
        assert is_valid_signature(key, b'[{"event":"delivered"}]\r\n', signature, "1700000000")
        assert not is_valid_signature(key, b'[{"event":"bounce"}]\r\n', signature, "1700000000")
