"""The payload codec: AES-256-GCM per payload, a keyring that rotates, and the settings that build it."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from herald.privacy.payload_codec import (
    ENCODING,
    KEY_ID_METADATA,
    EncryptionCodec,
    Undecryptable,
    UnknownKey,
    decode_in_place,
    payloads_in,
)
from herald.settings import InvalidSetting, load_settings
from herald.temporal.client import data_converter

KEY_A, KEY_B = os.urandom(32), os.urandom(32)
RECIPIENT = "+15551234567"


def _plain(text: str = f'{{"recipient": "{RECIPIENT}"}}') -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=text.encode())


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


async def test_a_payload_round_trips_and_the_ciphertext_hides_it() -> None:
    """Encode then decode gives the original payload back, metadata included; the encoded one holds no plaintext."""
    codec = EncryptionCodec({"a": KEY_A}, "a")
    original = _plain()
    [encoded] = await codec.encode([original])
    assert encoded.metadata["encoding"] == ENCODING
    assert encoded.metadata[KEY_ID_METADATA] == b"a"
    assert RECIPIENT.encode() not in encoded.SerializeToString()
    assert await codec.decode([encoded]) == [original]


async def test_every_encoding_uses_a_fresh_nonce() -> None:
    """The same payload encrypted twice gives two different ciphertexts (a random 12-byte nonce each time)."""
    codec = EncryptionCodec({"a": KEY_A}, "a")
    first, second = await codec.encode([_plain(), _plain()])
    assert first.data[:12] != second.data[:12] and first.data != second.data


async def test_rotation_keeps_decoding_what_the_old_key_wrote() -> None:
    """With key B active, a payload written under key A still decodes, and new payloads are written under B."""
    old = EncryptionCodec({"a": KEY_A}, "a")
    [written_before] = await old.encode([_plain()])
    rotated = EncryptionCodec({"a": KEY_A, "b": KEY_B}, "b")
    [written_after] = await rotated.encode([_plain()])
    assert written_after.metadata[KEY_ID_METADATA] == b"b"
    assert await rotated.decode([written_before, written_after]) == [_plain(), _plain()]


async def test_tampered_ciphertext_is_refused_naming_the_key_id_only() -> None:
    """One flipped bit fails authentication; the error names the key id and carries nothing of the content."""
    codec = EncryptionCodec({"a": KEY_A}, "a")
    [encoded] = await codec.encode([_plain()])
    tampered = Payload()
    tampered.CopyFrom(encoded)
    tampered.data = encoded.data[:-1] + bytes([encoded.data[-1] ^ 1])
    with pytest.raises(Undecryptable) as refused:
        await codec.decode([tampered])
    assert "'a'" in str(refused.value) and RECIPIENT not in str(refused.value)


async def test_the_key_id_is_bound_as_associated_data() -> None:
    """Relabelling a payload with another id fails even when both ids hold the same key bytes."""
    codec = EncryptionCodec({"a": KEY_A, "alias": KEY_A}, "a")
    [encoded] = await codec.encode([_plain()])
    encoded.metadata[KEY_ID_METADATA] = b"alias"
    with pytest.raises(Undecryptable):
        await codec.decode([encoded])


async def test_an_unknown_key_id_is_refused_naming_it() -> None:
    """A payload written under a key the ring lacks fails with the id in the message, not the content."""
    [encoded] = await EncryptionCodec({"retired": KEY_A}, "retired").encode([_plain()])
    with pytest.raises(UnknownKey) as refused:
        await EncryptionCodec({"b": KEY_B}, "b").decode([encoded])
    assert "'retired'" in str(refused.value) and RECIPIENT not in str(refused.value)


async def test_plaintext_payloads_pass_through_decode() -> None:
    """Payloads written before encryption (any encoding but binary/encrypted) come back untouched, so old histories replay."""
    codec = EncryptionCodec({"a": KEY_A}, "a")
    plain = [_plain(), Payload(metadata={"encoding": b"binary/null"})]
    assert await codec.decode(plain) == plain


def test_a_codec_refuses_a_short_key_and_a_missing_active_key_without_showing_keys() -> None:
    """A key that is not 32 bytes, or an active id outside the ring, is refused; the key bytes are never in the message."""
    with pytest.raises(ValueError) as short:
        EncryptionCodec({"a": KEY_A[:16]}, "a")
    assert "32 bytes" in str(short.value) and KEY_A[:16].hex() not in str(short.value)
    with pytest.raises(ValueError):
        EncryptionCodec({"a": KEY_A}, "b")
    assert _b64(KEY_A) not in repr(EncryptionCodec({"a": KEY_A}, "a"))


async def test_the_data_converter_encrypts_pydantic_values_when_keys_are_set() -> None:
    """Keys configured: values go through pydantic, then the codec; none configured: pydantic's alone."""
    plain = data_converter(load_settings({}).temporal)
    assert plain.payload_converter_class is pydantic_data_converter.payload_converter_class
    assert plain.payload_codec is None
    settings = load_settings({"HERALD_CODEC_KEYS": f"a:{_b64(KEY_A)}"})
    converter = data_converter(settings.temporal)
    [encoded] = await converter.encode([{"to": RECIPIENT}])
    assert encoded.metadata["encoding"] == ENCODING and RECIPIENT.encode() not in encoded.data
    assert await converter.decode([encoded], [dict]) == [{"to": RECIPIENT}]


async def test_a_failures_message_and_stack_trace_are_sealed_like_a_payload() -> None:
    """An exception's text leaves as the failure's encoded attributes, under the codec; decoded, it is the text again."""
    converter = data_converter(load_settings({"HERALD_CODEC_KEYS": f"a:{_b64(KEY_A)}"}).temporal)
    failure = Failure()
    try:
        raise ApplicationError(f"no route for {RECIPIENT}")
    except ApplicationError as error:  # raised, so it has a stack trace to seal too
        await converter.encode_failure(error, failure)
    assert (failure.message, failure.stack_trace) == ("Encoded failure", "")
    assert failure.encoded_attributes.metadata["encoding"] == ENCODING
    assert RECIPIENT.encode() not in failure.SerializeToString()
    decoded = await converter.decode_failure(failure)
    assert isinstance(decoded, ApplicationError) and decoded.message == f"no route for {RECIPIENT}"
    assert "raise ApplicationError" in json.loads(failure.encoded_attributes.data)["stack_trace"]  # opened in place


async def test_decode_in_place_reaches_payloads_inside_history_events() -> None:
    """Every payload nested in a history event (input, memo map) is found and decoded where it lies."""
    codec = EncryptionCodec({"a": KEY_A}, "a")
    [secret] = await codec.encode([_plain()])
    event = HistoryEvent()
    event.workflow_execution_started_event_attributes.input.payloads.append(secret)
    event.workflow_execution_started_event_attributes.memo.fields["m"].CopyFrom(secret)
    assert len(payloads_in([event])) == 2
    await decode_in_place([event], codec)
    assert RECIPIENT.encode() in event.SerializeToString()


# ---- settings --------------------------------------------------------------------------------------


def test_keys_come_from_the_variable_and_from_files_and_the_first_is_active(tmp_path: Path) -> None:
    """HERALD_CODEC_KEYS and HERALD_CODEC_KEY_FILES (comments and blank lines allowed) fill one ring; the first key encrypts."""
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"# mounted secret\n\nold:{_b64(KEY_B)}\n")
    codec = load_settings({"HERALD_CODEC_KEYS": f"new:{_b64(KEY_A)}", "HERALD_CODEC_KEY_FILES": str(keys_file)}).temporal.codec
    assert list(codec.keys) == ["new", "old"] and codec.active_key == "new"
    assert codec.keys["old"].get_secret_value() == KEY_B
    chosen = load_settings({"HERALD_CODEC_KEY_FILES": str(keys_file), "HERALD_CODEC_KEYS": f"new:{_b64(KEY_A)}", "HERALD_CODEC_ACTIVE_KEY": "old"})
    assert chosen.temporal.codec.active_key == "old"


def test_no_key_means_no_encryption() -> None:
    """Nothing configured leaves the ring empty: payloads travel in plaintext, as before encryption existed."""
    codec = load_settings({}).temporal.codec
    assert codec.keys == {} and codec.active_key is None


def test_keys_never_show_in_a_repr() -> None:
    """Settings printed or logged show the key ids, never the key bytes."""
    settings = load_settings({"HERALD_CODEC_KEYS": f"a:{_b64(KEY_A)}"})
    assert _b64(KEY_A) not in repr(settings) and repr(KEY_A) not in repr(settings)


@pytest.mark.parametrize(
    "env,message",
    [
        ({"HERALD_CODEC_KEYS": f"{_b64(KEY_A)}"}, "HERALD_CODEC_KEYS: each key must be id:base64key"),
        ({"HERALD_CODEC_KEYS": "a:not base64!"}, "HERALD_CODEC_KEYS: key a: must be standard base64"),
        ({"HERALD_CODEC_KEYS": f"a:{_b64(KEY_A[:16])}"}, "HERALD_CODEC_KEYS: key a: must decode to 32 bytes (AES-256), not 16"),
        ({"HERALD_CODEC_KEYS": f"a:{_b64(KEY_A)},a:{_b64(KEY_B)}"}, "HERALD_CODEC_KEYS: key id a is given twice"),
        (
            {"HERALD_CODEC_KEYS": f"a:{_b64(KEY_A)}", "HERALD_CODEC_ACTIVE_KEY": "b"},
            "HERALD_CODEC_ACTIVE_KEY: must be the id of a key in HERALD_CODEC_KEYS or HERALD_CODEC_KEY_FILES (configured ids: a)",
        ),
        (
            {"HERALD_CODEC_ACTIVE_KEY": "b"},
            "HERALD_CODEC_ACTIVE_KEY: must be the id of a key in HERALD_CODEC_KEYS or HERALD_CODEC_KEY_FILES (configured ids: none)",
        ),
        ({"HERALD_CODEC_KEY_FILES": "/nonexistent/herald-keys"}, "HERALD_CODEC_KEY_FILES: /nonexistent/herald-keys: cannot be read"),
        ({"HERALD_CODEC_SERVER_CORS_ORIGINS": "*"}, "HERALD_CODEC_SERVER_CORS_ORIGINS: each origin must be scheme://host[:port]"),
        ({"HERALD_CODEC_SERVER_PORT": "http"}, "HERALD_CODEC_SERVER_PORT: must be a port number from 1 to 65535"),
    ],
)
def test_a_bad_codec_setting_fails_in_one_line_without_key_material(env: dict[str, str], message: str) -> None:
    """Each mistake names the variable and its rule in one line; no key bytes, encoded or raw, appear."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings(env)
    text = str(refused.value)
    assert text.startswith(message) and "\n" not in text
    for key in (KEY_A, KEY_B, KEY_A[:16]):
        assert _b64(key) not in text


def test_a_bad_line_in_a_key_file_is_named_by_file_and_line(tmp_path: Path) -> None:
    """A key file's mistake names the file and the line number, never the line itself."""
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"a:{_b64(KEY_A)}\nb:{_b64(KEY_B)[:-4]}\n")
    with pytest.raises(InvalidSetting) as refused:
        load_settings({"HERALD_CODEC_KEY_FILES": str(keys_file)})
    assert str(refused.value) == f"HERALD_CODEC_KEY_FILES: {keys_file} line 2: key b: must decode to 32 bytes (AES-256), not 30"
