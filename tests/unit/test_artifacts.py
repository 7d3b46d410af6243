"""An artifact's ref names its bytes without holding them, bad input is refused by field and rule, and verify
sends only the bytes the intent names."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import ValidationError

from herald.core.artifacts import (
    MAX_ARTIFACT_BYTES,
    ArtifactMismatch,
    ArtifactRef,
    ArtifactRefused,
    StoredArtifact,
    artifact_ref,
    verify,
)

CONTENT = b"%PDF-1.7 monthly statement for Jane Example"
FILENAME = "statement-jane-example.pdf"


def ref_of(content: bytes, **overrides: object) -> ArtifactRef:
    fields = {
        "sha256": hashlib.sha256(content).hexdigest(),
        "size_bytes": len(content),
        "media_type": "application/pdf",
        "filename": FILENAME,
    }
    return ArtifactRef(**{**fields, **overrides})


def test_verify_returns_the_content_the_intent_names() -> None:
    """Bytes whose hash and size match the ref are returned unchanged."""
    ref = ref_of(CONTENT)
    assert verify(StoredArtifact(ref=ref, content=CONTENT), ref) == CONTENT


def test_verify_refuses_an_artifact_not_in_the_store() -> None:
    """Nothing loaded is a mismatch, not an empty attachment."""
    with pytest.raises(ArtifactMismatch) as refused:
        verify(None, ref_of(CONTENT))
    assert refused.value.rule == "not in the store"
    assert str(refused.value) == "artifact: not in the store"


def test_verify_recomputes_the_hash_and_catches_replaced_bytes() -> None:
    """A row whose content was replaced keeps its key and its recorded ref, but not the hash of what it holds."""
    ref = ref_of(CONTENT)
    replaced = CONTENT.replace(b"Jane", b"John")  # same length, so only the hash can tell
    with pytest.raises(ArtifactMismatch) as refused:
        verify(StoredArtifact(ref=ref, content=replaced), ref)
    actual = hashlib.sha256(replaced).hexdigest()
    assert refused.value.rule == (
        f"stored bytes hash to {actual[:12]}…, the intent names {ref.sha256[:12]}… (tampered or replaced)"
    )
    assert "John" not in str(refused.value)


def test_verify_refuses_a_size_other_than_the_one_named() -> None:
    """A ref whose size disagrees with the bytes of its own hash is refused, naming both sizes."""
    ref = ref_of(CONTENT, size_bytes=len(CONTENT) - 4)
    with pytest.raises(ArtifactMismatch) as refused:
        verify(StoredArtifact(ref=ref_of(CONTENT), content=CONTENT), ref)
    assert str(refused.value) == f"artifact: size {len(CONTENT)} bytes, the intent names {len(CONTENT) - 4}"


def test_artifact_ref_describes_the_content_and_carries_no_bytes() -> None:
    """The ref is hash, size, media type and filename, so Temporal history never holds the attachment."""
    ref = artifact_ref(CONTENT, media_type="application/pdf", filename=FILENAME)
    assert ref == ref_of(CONTENT)
    assert set(ref.model_dump()) == {"sha256", "size_bytes", "media_type", "filename"}
    with pytest.raises(ValidationError):
        ArtifactRef(**ref.model_dump(), content=CONTENT)


def test_an_empty_artifact_is_allowed() -> None:
    """Zero bytes is a size like any other: the table allows it and so does the ref."""
    assert artifact_ref(b"", media_type="text/plain", filename="empty.txt").size_bytes == 0


@pytest.mark.parametrize(
    "overrides",
    [
        {"sha256": "A" * 64},  # uppercase: one content must have one key
        {"sha256": "a" * 63},
        {"sha256": "a" * 64 + "\n"},
        {"size_bytes": -1},
        {"media_type": "application/PDF"},
        {"media_type": "pdf"},
        {"media_type": "text/plain; charset=utf-8"},
        {"filename": ""},
        {"filename": "x" * 256},
        {"filename": "../etc/passwd"},
        {"filename": "C:\\reports\\x.pdf"},
        {"filename": "x.pdf\r\nBcc: someone"},
        {"filename": ".."},
    ],
)
def test_artifact_ref_refuses_malformed_fields(overrides: dict[str, object]) -> None:
    """A ref that arrives in an intent or from history is held to the same rules put applies."""
    with pytest.raises(ValidationError) as refused:
        ref_of(CONTENT, **overrides)
    if len(str(overrides.get("filename", ""))) > 2:  # "." and ".." are spelled out by the rule itself
        assert str(overrides["filename"]) not in str(refused.value)


def test_artifact_ref_accepts_a_long_unicode_filename() -> None:
    """Names up to 255 characters, in any script, are ordinary attachment names."""
    assert ref_of(CONTENT, filename="Überweisung–" + "é" * 239 + ".pdf").filename.endswith(".pdf")


def test_put_refuses_content_over_the_limit_without_quoting_it() -> None:
    """One byte past MAX_ARTIFACT_BYTES is refused, naming the field and the rule, not the bytes."""
    content = b"Jane Example " * (MAX_ARTIFACT_BYTES // 13 + 1)
    with pytest.raises(ArtifactRefused) as refused:
        artifact_ref(content, media_type="text/plain", filename="big.txt")
    assert (refused.value.field, refused.value.rule) == ("content", "must be at most 20971520 bytes (20 MiB)")
    assert "Jane" not in str(refused.value)
    assert artifact_ref(content[:MAX_ARTIFACT_BYTES], media_type="text/plain", filename="big.txt").size_bytes == (
        MAX_ARTIFACT_BYTES
    )


@pytest.mark.parametrize(
    ("media_type", "filename", "field", "rule"),
    [
        ("application/PDF", FILENAME, "media_type", "must be a lowercase type/subtype without parameters"),
        ("text/plain\n", FILENAME, "media_type", "must be a lowercase type/subtype without parameters"),
        ("", FILENAME, "media_type", "must be a lowercase type/subtype without parameters"),
        ("application/pdf", "", "filename", "must be 1 to 255 characters"),
        ("application/pdf", "jane/" + FILENAME, "filename", "must not contain a path separator"),
        ("application/pdf", "jane\\" + FILENAME, "filename", "must not contain a path separator"),
        ("application/pdf", FILENAME + "\x00", "filename", "must not contain control characters"),
        ("application/pdf", FILENAME + "\x85", "filename", "must not contain control characters"),
        ("application/pdf", FILENAME + "\u2028", "filename", "must not contain control characters or line"),
    ],
)
def test_put_refuses_bad_input_by_field_and_rule(media_type: str, filename: str, field: str, rule: str) -> None:
    """Each refusal names the field and the rule, and quotes neither the content nor the filename."""
    with pytest.raises(ArtifactRefused) as refused:
        artifact_ref(CONTENT, media_type=media_type, filename=filename)
    assert isinstance(refused.value, ValueError)
    assert refused.value.field == field
    assert refused.value.rule.startswith(rule)
    assert str(refused.value) == f"{field}: {refused.value.rule}"
    assert "Jane" not in str(refused.value) and "jane" not in str(refused.value)


def test_a_stored_artifact_keeps_its_bytes_out_of_its_repr() -> None:
    """Logging a loaded artifact must not write up to 20 MiB of possibly personal data."""
    stored = StoredArtifact(ref=ref_of(CONTENT), content=CONTENT)
    assert "monthly statement" not in repr(stored)
