"""Immutable artifacts (a generated report, an invoice) stored and loaded by their content.

An e-mail intent names an attachment by an ``ArtifactRef``: the SHA-256 and size of the bytes,
their media type and filename. The ref travels in Temporal history, so it never holds the bytes;
the store does. Right before the message is built, the submit activity loads the artifact and
calls ``verify``, which recomputes the hash of what was actually loaded: a row replaced in the
database is caught there, not sent.

Errors, and what each means:

    ValueError
      └── ArtifactRefused    put was given something that cannot be an artifact (too large, a bad
                             media type or filename); names the field and the rule, never a value
    Exception
      └── ArtifactMismatch   what the store holds is not what the intent names (absent, other
                             bytes, other size); names the rule, never the content

Where artifacts are kept is the ledger's (``herald.ledger.artifacts``): this module is what an
artifact is, pure.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import unicodedata

from pydantic import ConfigDict, Field, field_validator

from herald.core.outcomes import Frozen

# An artifact goes out base64-encoded, which turns every 57 bytes into a 76-character line plus
# CRLF: 78/57, about 1.37 times the size. 20 MiB of content is about 28.7 MB on the wire, which
# leaves room for the text part and headers under the 30 MB a message may have at SendGrid, the
# relay we submit to. Mailboxes with smaller limits (a Postfix left at its 10 MB default) may
# still refuse the message; that arrives as a bounce, a definite answer, not a silent loss.
MAX_ARTIFACT_BYTES = 20 * 1024 * 1024

SHA256_PATTERN = r"^[0-9a-f]{64}$"
# type/subtype in lowercase, without parameters: media types are case-insensitive, so one spelling
# keeps equal types equal; a charset parameter belongs to the MIME part, not to the stored bytes.
MEDIA_TYPE_PATTERN = r"^[a-z0-9.+-]+/[a-z0-9.+-]+$"
_MEDIA_TYPE = re.compile(MEDIA_TYPE_PATTERN)
MAX_FILENAME_CHARS = 255  # the common filesystem limit for one name; mail clients save it as one


def _broken_filename_rule(filename: str) -> str | None:
    """The rule ``filename`` breaks, or None; it never quotes the name (it may name a person)."""
    if not 1 <= len(filename) <= MAX_FILENAME_CHARS:
        return f"must be 1 to {MAX_FILENAME_CHARS} characters"
    # A recipient's mail client saves the attachment under this name: a separator could make it
    # write outside the folder the user chose.
    if "/" in filename or "\\" in filename:
        return "must not contain a path separator (/ or \\)"
    # Control characters (CR and LF above all) and the Unicode line and paragraph separators would
    # let a name break out of its MIME header.
    if any(unicodedata.category(char) in ("Cc", "Zl", "Zp") for char in filename):
        return "must not contain control characters or line or paragraph separators"
    if filename in {".", ".."}:
        return "must name a file, not the current or parent folder (. or ..)"
    return None


class ArtifactRef(Frozen):
    """What an intent names: enough to find the artifact and prove it is the same one, never the bytes."""

    # A refused filename must not come back in the error: it may be personal data.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    sha256: str = Field(pattern=SHA256_PATTERN)
    # No upper bound here: refs already in Temporal history must still load if the limit is lowered.
    size_bytes: int = Field(ge=0)
    media_type: str = Field(pattern=MEDIA_TYPE_PATTERN)
    filename: str

    @field_validator("filename")
    @classmethod
    def _plain_file_name(cls, filename: str) -> str:
        rule = _broken_filename_rule(filename)
        if rule is not None:
            raise ValueError(rule)
        return filename


@dataclasses.dataclass(frozen=True)
class StoredArtifact:
    """An artifact as the store returned it; ``verify`` decides whether it is the one an intent names."""

    ref: ArtifactRef
    # Kept out of repr: the bytes are up to 20 MiB and may be personal data.
    content: bytes = dataclasses.field(repr=False)


class ArtifactRefused(ValueError):
    """``put`` was given something that cannot be stored as an artifact; nothing was stored."""

    def __init__(self, field: str, rule: str) -> None:
        self.field = field
        self.rule = rule
        super().__init__(f"{field}: {rule}")


class ArtifactMismatch(Exception):
    """The store does not hold the artifact the intent names; sending it would send something else."""

    def __init__(self, rule: str) -> None:
        self.rule = rule
        super().__init__(f"artifact: {rule}")


def artifact_ref(content: bytes, *, media_type: str, filename: str) -> ArtifactRef:
    """The ref ``content`` is stored under; raises ``ArtifactRefused`` for input that cannot be stored.

    Pure, so a caller can refuse bad input before it opens a connection.
    """
    if len(content) > MAX_ARTIFACT_BYTES:
        raise ArtifactRefused("content", f"must be at most {MAX_ARTIFACT_BYTES} bytes ({MAX_ARTIFACT_BYTES >> 20} MiB)")
    # fullmatch, not match: Python's `$` also matches before a final newline.
    if _MEDIA_TYPE.fullmatch(media_type) is None:
        raise ArtifactRefused("media_type", "must be a lowercase type/subtype without parameters, e.g. application/pdf")
    rule = _broken_filename_rule(filename)
    if rule is not None:
        raise ArtifactRefused("filename", rule)
    return ArtifactRef(
        sha256=hashlib.sha256(content).hexdigest(), size_bytes=len(content), media_type=media_type, filename=filename
    )


def verify(stored: StoredArtifact | None, expected: ArtifactRef) -> bytes:
    """The content, only if it is exactly what ``expected`` names; ``ArtifactMismatch`` otherwise.

    The hash is recomputed from the bytes loaded, not read from the row: a row whose content was
    replaced in the database keeps its key but not its hash.
    """
    if stored is None:
        raise ArtifactMismatch("not in the store")
    actual = hashlib.sha256(stored.content).hexdigest()
    if actual != expected.sha256:
        raise ArtifactMismatch(
            f"stored bytes hash to {actual[:12]}…, the intent names {expected.sha256[:12]}… (tampered or replaced)"
        )
    if len(stored.content) != expected.size_bytes:
        raise ArtifactMismatch(f"size {len(stored.content)} bytes, the intent names {expected.size_bytes}")
    return stored.content
