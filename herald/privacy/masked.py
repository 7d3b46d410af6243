"""A recipient as an operator may see them: masked, never in clear, and their fingerprint shortened.

An operator who typed a number sees it back masked (``+15•••••01``), enough to tell it from the one
they meant to type, not enough for a screenshot or a shoulder to read it back; an address keeps
its first letters and the domain's top level (``s•••@e•••.com``). A fingerprint is shown by its key id
and first hex digits: it names one person for someone who holds the key, and nobody else.
"""

from __future__ import annotations

from herald.privacy.fingerprints import canonical_recipient

# A fixed run of dots: how much is hidden must not tell how long it was.
_HIDDEN = "•••"


def masked_recipient(recipient: str) -> str:
    """The canonical form of `recipient` with all but its ends hidden (RecipientRefused, a
    ValueError, when no door accepts it)."""
    canonical = canonical_recipient(recipient)
    if "@" not in canonical:  # +<country><number>: the '+', two digits, then the last two
        return f"{canonical[:3]}{_HIDDEN}{canonical[-2:]}"
    local, _, domain = canonical.rpartition("@")
    name, dot, top = domain.rpartition(".")
    shown_domain = f"{(name or top)[:1]}{_HIDDEN}{dot}{top}" if dot else f"{domain[:1]}{_HIDDEN}"
    return f"{local[:1]}{_HIDDEN}@{shown_domain}"


def short_fingerprint(fingerprint: str, digits: int = 12) -> str:
    """``<key id>:<first hex digits>…``; a bare SHA-256 from before keyed fingerprints by its first digits."""
    key_id, colon, mac = fingerprint.rpartition(":")
    return f"{key_id}{colon}{mac[:digits]}…"
