"""Infobip's delivery reports, authenticated: an HMAC of each message's id, carried in its callbackData.

Infobip's per-request webhook (``webhooks.delivery.url``) has no authentication option, and the HMAC
its subscription profiles offer is not documented far enough to verify (header name, signing input:
UNCONFIRMED in /work/wt/infobip_spec.md section 4). What Infobip does document is that each report
echoes the ``callbackData`` the message was sent with (``webhooks.callbackData``, at most 4,000
characters). So the adapter sends, per message::

    callbackData = "hb1:" <key id> ":" base64url(HMAC-SHA-256(key, "herald infobip callbackData" NUL messageId))

and the receipt route accepts a result only when its callbackData verifies for that result's own
``messageId``: a result made up by anyone without the key, or a real callbackData copied onto another
message's result, is refused. The active key signs; every key in the ring verifies (rotation).

What it does not prove: the rest of the result (status, error, times) is not covered, so whoever has
seen a message's callbackData (in a captured report, in Infobip's portal or logs) can make up a
result for that one message. Basic credentials on the route (HERALD_INFOBIP_WEBHOOK_BASIC, for a
subscription profile) and TLS to the receipt server close that; the HMAC alone bounds the damage to
messages whose callbackData has leaked, and never lets a report name a message Herald did not send.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Self

from herald.privacy.key_sets import KEY_ID, KeySet
from herald.settings import InfobipWebhookSettings

VERSION = "hb1"
_DOMAIN = b"herald infobip callbackData\x00"
# Ours are about 60 characters (version, a key id of at most 64, 43 of base64url): anything longer
# is not ours and is refused before any HMAC is computed.
MAX_CALLBACK_DATA_CHARS = 4 + 64 + 1 + 43


class CallbackKeys(KeySet):
    """The webhook keys: id -> 32 random bytes; the active one signs callbackData, every one verifies."""

    KIND = "Infobip webhook key"

    @classmethod
    def from_settings(cls, settings: InfobipWebhookSettings) -> Self | None:
        """The configured keys, or None when there are none (nothing can be signed or verified)."""
        return cls.configured(settings.keys, settings.active_key)

    def sign(self, message_id: str) -> str:
        """The callbackData for the message Herald sends under `message_id`, under the active key."""
        return f"{VERSION}:{self.active_key_id}:{_b64(self._mac(self.active_key_id, message_id))}"

    def verify(self, message_id: str, callback_data: str | None) -> bool:
        """Whether `callback_data` is ours for exactly this `message_id`, under a key we hold; in
        constant time once the layout is read."""
        if not callback_data or len(callback_data) > MAX_CALLBACK_DATA_CHARS:
            return False
        version, _, rest = callback_data.partition(":")
        key_id, _, tag = rest.partition(":")
        if version != VERSION or not KEY_ID.fullmatch(key_id) or key_id not in self._keys:
            return False
        return hmac.compare_digest(_b64(self._mac(key_id, message_id)).encode("ascii"), tag.encode("utf-8", "replace"))

    def _mac(self, key_id: str, message_id: str) -> bytes:
        # surrogatepass: an id from a hostile JSON body may hold a lone surrogate; it must fail, not raise.
        signed = _DOMAIN + message_id.encode("utf-8", "surrogatepass")
        return hmac.new(self._keys[key_id], signed, hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
