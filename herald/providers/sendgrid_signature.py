"""SendGrid's Signed Event Webhook: ECDSA P-256 over the timestamp header and the raw body.

SendGrid signs each event POST with a key pair it generates per account: the signature (base64,
DER-encoded ECDSA over SHA-256) goes in ``X-Twilio-Email-Event-Webhook-Signature``, the time in
``X-Twilio-Email-Event-Webhook-Timestamp``, and the signed bytes are the timestamp's digits
followed by the request body exactly as received. The verification key is the public half,
base64 DER SubjectPublicKeyInfo (PEM is accepted too).

Anything that cannot be decoded counts as a bad signature: a verifier answers yes or no, never
raises on input an attacker controls.
"""

from __future__ import annotations

import base64
import binascii

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from herald.settings.rules import load_public_key as load_public_key  # where the settings check it

SIGNATURE_HEADER = "X-Twilio-Email-Event-Webhook-Signature"
TIMESTAMP_HEADER = "X-Twilio-Email-Event-Webhook-Timestamp"


def is_valid_signature(public_key: ec.EllipticCurvePublicKey, payload: bytes, signature: str, timestamp: str) -> bool:
    """Whether `signature` signs `timestamp` + `payload` under `public_key`."""
    try:
        decoded = base64.b64decode(signature, validate=True)
        signed = timestamp.encode("ascii") + payload
        public_key.verify(decoded, signed, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError, TypeError, binascii.Error, UnicodeEncodeError):
        return False
    return True


def sign(private_key: ec.EllipticCurvePrivateKey, payload: bytes, timestamp: str) -> str:
    """The signature header value SendGrid would send (for the local ESP emulator and tests)."""
    return base64.b64encode(private_key.sign(timestamp.encode("ascii") + payload, ec.ECDSA(hashes.SHA256()))).decode()


def public_key_text(private_key: ec.EllipticCurvePrivateKey) -> str:
    """The verification key as SendGrid's console shows it: base64 DER SubjectPublicKeyInfo."""
    der = private_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(der).decode()


def new_private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())
