"""Each provider's report vocabulary behind one small interface, looked up by the inbox row's provider.

The receipt path classifies a stored report at the edge (its status label onto ``ProviderStatus``,
a failure as retryable or not) so that the workflow reads no provider's table. Which table applies
is the inbox row's ``provider`` column; ``vocabulary_for`` answers None for a provider Herald has no
vocabulary for, and the caller must then leave the report alone rather than guess.

    ReportVocabulary
      ├── "twilio"    herald.providers.twilio_codes (status labels, error codes)
      ├── "infobip"   herald.providers.infobip_codes (status names, error ids)
      └── "sendgrid"  herald.providers.sendgrid_events (event names, enhanced status codes)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Protocol

from herald.core.outcomes import ProviderStatus
from herald.providers import infobip_codes, sendgrid_events, twilio_codes


class ReportVocabulary(Protocol):
    """What the receipt path asks of a provider's vocabulary about one stored report."""

    def map_status(self, label: str) -> ProviderStatus:
        """The provider's status label (or event name) as Herald's status."""
        ...

    def is_retryable(self, label: str, error_code: int | None) -> bool:
        """Whether a failed message with this label and error code may be sent again."""
        ...


class TwilioVocabulary:
    """Twilio's status labels and error codes; the error code alone decides retryability."""

    def map_status(self, label: str) -> ProviderStatus:
        return twilio_codes.map_status(label)

    def is_retryable(self, label: str, error_code: int | None) -> bool:
        return twilio_codes.is_retryable(error_code)


class InfobipVocabulary:
    """Infobip's status names and error ids; the status and the error's ``permanent`` flag decide retryability."""

    def map_status(self, label: str) -> ProviderStatus:
        return infobip_codes.map_status(label)

    def is_retryable(self, label: str, error_code: int | None) -> bool:
        return infobip_codes.is_retryable(label, error_code)


class SendGridVocabulary:
    """SendGrid's event names and enhanced status codes (encoded by ``sendgrid_events.error_code_of``)."""

    def map_status(self, label: str) -> ProviderStatus:
        return sendgrid_events.map_status(label)

    def is_retryable(self, label: str, error_code: int | None) -> bool:
        return sendgrid_events.is_retryable(label, error_code)


# Keyed by the value of receipt_inbox.provider that each receipt route writes.
REPORT_VOCABULARIES: Mapping[str, ReportVocabulary] = MappingProxyType(
    {"twilio": TwilioVocabulary(), "infobip": InfobipVocabulary(), "sendgrid": SendGridVocabulary()}
)


def vocabulary_for(provider: str | None) -> ReportVocabulary | None:
    """The vocabulary that reads ``provider``'s reports, or None when Herald has none for it."""
    if provider is None:
        return None
    return REPORT_VOCABULARIES.get(provider)
