"""Twilio request signatures: the published vector and the edges of validation."""

from __future__ import annotations

from herald.providers.twilio_signature import compute_signature, is_valid_signature

# Twilio's published example of X-Twilio-Signature.
VECTOR_TOKEN = "12345"
VECTOR_URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
VECTOR_PARAMS = {
    "CallSid": "CA1234567890ABCDE",
    "Caller": "+12349013030",
    "Digits": "1234",
    "From": "+12349013030",
    "To": "+18005551212",
}
VECTOR_SIGNATURE = "0/KCTR6DLpKmkAf8muzZqo1nDgQ="


def test_published_vector() -> None:
    """compute_signature reproduces Twilio's published example signature exactly."""
    assert compute_signature(VECTOR_TOKEN, VECTOR_URL, VECTOR_PARAMS) == VECTOR_SIGNATURE


def test_published_vector_validates() -> None:
    """is_valid_signature accepts the published example's signature."""
    assert is_valid_signature(VECTOR_TOKEN, VECTOR_URL, VECTOR_PARAMS, VECTOR_SIGNATURE)


def test_parameter_order_does_not_matter() -> None:
    """Parameters are sorted by name, so the order they arrive in does not change the signature."""
    shuffled = list(reversed(list(VECTOR_PARAMS.items())))
    assert compute_signature(VECTOR_TOKEN, VECTOR_URL, shuffled) == VECTOR_SIGNATURE


def test_pairs_and_mapping_agree() -> None:
    """A list of (name, value) pairs signs the same as the equivalent mapping."""
    assert compute_signature(VECTOR_TOKEN, VECTOR_URL, list(VECTOR_PARAMS.items())) == VECTOR_SIGNATURE


def test_repeated_names_are_all_signed() -> None:
    """Every value of a repeated parameter name is part of the signature, in a deterministic order."""
    one = compute_signature("t", "https://example.test/cb", [("MediaUrl", "a"), ("MediaUrl", "b")])
    swapped = compute_signature("t", "https://example.test/cb", [("MediaUrl", "b"), ("MediaUrl", "a")])
    only_first = compute_signature("t", "https://example.test/cb", [("MediaUrl", "a")])
    assert one == swapped
    assert one != only_first


def test_tampered_value_is_rejected() -> None:
    """Changing any parameter value invalidates the signature."""
    tampered = {**VECTOR_PARAMS, "Digits": "1235"}
    assert not is_valid_signature(VECTOR_TOKEN, VECTOR_URL, tampered, VECTOR_SIGNATURE)


def test_added_parameter_is_rejected() -> None:
    """An extra parameter the signer did not send invalidates the signature."""
    extended = {**VECTOR_PARAMS, "MessageStatus": "delivered"}
    assert not is_valid_signature(VECTOR_TOKEN, VECTOR_URL, extended, VECTOR_SIGNATURE)


def test_url_is_part_of_the_signature() -> None:
    """The query string is signed: a different URL invalidates the signature."""
    other_url = "https://mycompany.com/myapp.php?foo=1"
    assert not is_valid_signature(VECTOR_TOKEN, other_url, VECTOR_PARAMS, VECTOR_SIGNATURE)


def test_wrong_token_is_rejected() -> None:
    """A signature made with another auth token does not validate."""
    assert not is_valid_signature("54321", VECTOR_URL, VECTOR_PARAMS, VECTOR_SIGNATURE)


def test_missing_or_garbage_signature_is_rejected() -> None:
    """A missing, empty or non-ASCII signature header is invalid rather than an error."""
    assert not is_valid_signature(VECTOR_TOKEN, VECTOR_URL, VECTOR_PARAMS, None)
    assert not is_valid_signature(VECTOR_TOKEN, VECTOR_URL, VECTOR_PARAMS, "")
    assert not is_valid_signature(VECTOR_TOKEN, VECTOR_URL, VECTOR_PARAMS, "ünïcode")
