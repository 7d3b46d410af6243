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


# --- The default port, written out or left out, as Twilio's own validator accepts it ---------------

_PORT_CASES = [
    # (URL the signer used, URL our endpoint is configured with)
    ("https://receipts.example.com/twilio/status?attempt=a1", "https://receipts.example.com:443/twilio/status?attempt=a1"),
    ("https://receipts.example.com:443/twilio/status?attempt=a1", "https://receipts.example.com/twilio/status?attempt=a1"),
    ("http://receipts.example.com/twilio/status", "http://receipts.example.com:80/twilio/status"),
    ("http://receipts.example.com:80/twilio/status", "http://receipts.example.com/twilio/status"),
    ("https://receipts.example.com/twilio/status", "https://receipts.example.com/twilio/status"),
]


def test_default_port_written_out_or_left_out_is_accepted() -> None:
    """A signature over the URL with its default port validates against the URL without it, and back."""
    for signed_url, configured_url in _PORT_CASES:
        signature = compute_signature(VECTOR_TOKEN, signed_url, VECTOR_PARAMS)
        assert is_valid_signature(VECTOR_TOKEN, configured_url, VECTOR_PARAMS, signature), (signed_url, configured_url)


def test_agrees_with_twilios_request_validator() -> None:
    """The twilio package's RequestValidator and ours give the same answer on every port spelling."""
    from twilio.request_validator import RequestValidator

    validator = RequestValidator(VECTOR_TOKEN)
    for signed_url, configured_url in _PORT_CASES:
        signature = compute_signature(VECTOR_TOKEN, signed_url, VECTOR_PARAMS)
        assert validator.compute_signature(signed_url, VECTOR_PARAMS) == signature
        assert validator.validate(configured_url, VECTOR_PARAMS, signature) is True
        assert is_valid_signature(VECTOR_TOKEN, configured_url, VECTOR_PARAMS, signature) is True
    # A different path or token is refused by both.
    signature = compute_signature(VECTOR_TOKEN, "https://receipts.example.com/twilio/status", VECTOR_PARAMS)
    for url, token in (("https://receipts.example.com/twilio/other", VECTOR_TOKEN), ("https://receipts.example.com/twilio/status", "x")):
        assert RequestValidator(token).validate(url, VECTOR_PARAMS, signature) is False
        assert is_valid_signature(token, url, VECTOR_PARAMS, signature) is False


def test_another_port_is_another_endpoint() -> None:
    """Only the scheme's default port is interchangeable: a signature for :8443 does not fit :443 or none."""
    signature = compute_signature(VECTOR_TOKEN, "https://receipts.example.com:8443/cb", VECTOR_PARAMS)
    assert not is_valid_signature(VECTOR_TOKEN, "https://receipts.example.com/cb", VECTOR_PARAMS, signature)
    assert not is_valid_signature(VECTOR_TOKEN, "https://receipts.example.com:443/cb", VECTOR_PARAMS, signature)
    assert is_valid_signature(VECTOR_TOKEN, "https://receipts.example.com:8443/cb", VECTOR_PARAMS, signature)
