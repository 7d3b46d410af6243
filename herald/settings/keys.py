"""The keyrings' sections: payload (codec) keys, fingerprint keys, key-encryption keys, and the
unsubscribe links' keys and address.
"""


from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    AliasGenerator,
    BeforeValidator,
    ConfigDict,
    EmailStr,
    Field,
    SecretBytes,
    model_validator,
)

from herald.settings.defaults import (
    no_trailing_slash,
)
from herald.settings.rules import (
    Rule,
)
from herald.settings.variables import (
    Section,
    keyring,
)

# ---- a keyring's three variables --------------------------------------------------------------------

_KEY_ENTRIES = Annotated[str, Rule("must be id:base64key entries separated by commas")]
_KEY_FILES = Annotated[str, Rule("must be paths of key files separated by commas")]
_ACTIVE_KEY = Annotated[str, Rule("must be the id of a key in the keyring's _KEYS or _KEY_FILES")]


def keyring_variables(prefix: str) -> ConfigDict:
    """A keyring section's variable names: <prefix>_ACTIVE_KEY, <prefix>_KEYS, <prefix>_KEY_FILES."""
    names = {"active_key": f"{prefix}_ACTIVE_KEY", "key_entries": f"{prefix}_KEYS", "key_files": f"{prefix}_KEY_FILES"}

    def variable(field: str) -> str | None:  # None: not a variable of its own (`keys` is read from two)
        return names.get(field)

    return ConfigDict(alias_generator=AliasGenerator(alias=variable))  # type: ignore[arg-type]


class KeyringSection(Section):
    """A keyring's variables, named by ``keyring_variables(PREFIX)``: <PREFIX>_KEYS and <PREFIX>_KEY_FILES
    read together into `keys` (an id may not repeat across the two), <PREFIX>_ACTIVE_KEY the id of
    the key that writes (it may name either)."""

    PURPOSE: ClassVar[str]  # what its keys are, in a refusal: "AES-256", "HMAC-SHA-256"
    # Whether the first key is made the active one when none is named (else its users choose).
    FIRST_KEY_ACTIVE: ClassVar[bool] = False

    keys: dict[str, SecretBytes] = Field(default_factory=dict)
    active_key: _ACTIVE_KEY | None = None
    # Where `keys` come from: id:base64key entries, and files holding one a line. Read into `keys`.
    key_entries: _KEY_ENTRIES | None = Field(None, exclude=True, repr=False)
    key_files: _KEY_FILES | None = Field(None, exclude=True, repr=False)

    @model_validator(mode="before")
    @classmethod
    def _read_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        variables = (cls.model_fields[field].alias for field in ("key_entries", "key_files", "active_key"))
        entries, files, active = (str(name) for name in variables)
        data = dict(data)
        if {entries, files, active} & set(data):
            given = data.pop(entries, None), data.pop(files, None), data.get(active)
            data["keys"] = keyring(*given, prefix=entries.removesuffix("_KEYS"), purpose=cls.PURPOSE)
        if cls.FIRST_KEY_ACTIVE and "keys" in data and data.get(active) is None:
            data[active] = next(iter(data["keys"]), None)
        return data


class CodecSettings(KeyringSection):
    """Payload encryption keys (herald/privacy/payload_codec.py): key id -> 32-byte AES-256 key.

    The active key encrypts; every key decrypts, so an old key kept here keeps its histories
    readable after a rotation. No keys: payloads reach Temporal in plaintext, as before.
    """

    model_config = keyring_variables("HERALD_CODEC")
    PURPOSE, FIRST_KEY_ACTIVE = "AES-256", True


class FingerprintSettings(KeyringSection):
    """Fingerprint keys (herald/privacy/fingerprints.py): id -> 32-byte HMAC key; the active one writes.

    A keyring of its own: a payload key and a fingerprint key are never the same secret.
    """

    model_config = keyring_variables("HERALD_FINGERPRINT")
    PURPOSE = "HMAC-SHA-256"


class KeyEncryptionSettings(KeyringSection):
    """Key-encryption keys (herald/privacy/key_encryption.py): id -> 32-byte AES-256 key; the active one
    wraps each new recipient data key, every one unwraps.

    A keyring of its own, never a payload or fingerprint key, and never in the ledger: a copy of the
    database without these opens no recipient's data key.
    """

    model_config = keyring_variables("HERALD_KEY_ENCRYPTION")
    PURPOSE = "AES-256"


def is_https_url(value: str) -> bool:
    """Whether `value` is an https:// URL with a host: the only link RFC 8058 mail clients post to."""
    scheme, _, rest = value.partition("://")
    return scheme.lower() == "https" and bool(rest.split("/")[0])


def _https(value: str) -> str:
    if not is_https_url(value):
        raise ValueError("not an https URL")
    return value


_UNSUBSCRIBE_URL_RULE = (
    "must be an https:// URL with a host (RFC 8058: mail clients post only to HTTPS), e.g. https://hooks.example.com"
)
# Unset, the links fall back to the receipt server's public URL, which is held to the same rule.
_UNSUBSCRIBE_FALLBACK_RULE = (
    "required when HERALD_UNSUBSCRIBE_KEYS are set and HERALD_RECEIPT_PUBLIC_URL, which the links fall back "
    "to, is not https:// (RFC 8058: mail clients post only to HTTPS); set an https:// URL, "
    "e.g. https://hooks.example.com"
)


def _days(value: Any) -> Any:
    """Digits only, as every whole-number variable (int() would also take "+60" and "6_0")."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("not a whole number")
    return value


class UnsubscribeSettings(KeyringSection):
    """One-click unsubscribe links in marketing e-mail (herald/privacy/unsubscribe.py): the keys that sign
    and verify their tokens, where the links point, how long they work.

    One set of variables, held whole by two sections: the e-mail section's (the SMTP adapter signs)
    and the receipt server's (it verifies). A keyring of its own: neither a fingerprint key nor a
    payload key (herald/privacy/unsubscribe.py says why). Without keys, marketing e-mail is refused, never
    sent without its unsubscribe link, and the receipt server refuses every link.
    """

    model_config = keyring_variables("HERALD_UNSUBSCRIBE")
    PURPOSE = "HMAC-SHA-256"
    # The public base the links are built on, where the receipt server's /unsubscribe/ path is
    # reached from the internet. HTTPS: RFC 8058 clients post only to an https URI. None: the
    # receipt server's public URL (HERALD_RECEIPT_PUBLIC_URL), which must then be https:// (Settings).
    url: Annotated[
        str, AfterValidator(_https), AfterValidator(no_trailing_slash), Rule(_UNSUBSCRIBE_URL_RULE)
    ] | None = Field(None, alias="HERALD_UNSUBSCRIBE_URL")
    # An address that also takes unsubscribe requests by mail (listed after the link; Herald does not
    # read that mailbox: whoever does can post the token in the subject to the link).
    mailto: Annotated[EmailStr, Rule("must be an e-mail address, e.g. unsubscribe@example.com")] | None = Field(
        None, alias="HERALD_UNSUBSCRIBE_MAILTO"
    )
    # How long a link works after its message was sent. At least 30 days: CAN-SPAM requires an
    # opt-out to work for 30 days after the message, and a person may read a newsletter weeks late.
    ttl_days: Annotated[
        int,
        BeforeValidator(_days),
        Field(ge=30, le=3650),
        Rule("must be a whole number of days from 30 to 3650 (an unsubscribe link must work for 30 days)"),
    ] = Field(60, alias="HERALD_UNSUBSCRIBE_TTL_DAYS")


