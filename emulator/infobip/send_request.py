"""The body of ``POST /sms/3/messages`` read as Infobip's OpenAPI schema (``SmsRequestEnvelope``)
describes it, and every broken rule named by its property path (``messages[0].destinations[0].to``)
in the phrasing of a Java bean-validation message, as Infobip's ``violations`` read.

Typed strictly: a number is not a string, ``true`` is not an integer. Unknown properties are ignored.
Three rules are the emulator's own, each said where it is made: ``messages`` and ``destinations``
must not be empty, a validity amount must be at least 1, and what it does not emulate (scheduled
sending, XML reports) is refused by name rather than silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from emulator.infobip.vocabulary import Violation

_INT32 = 2**31 - 1
Int32 = Annotated[int, Field(ge=-_INT32 - 1, le=_INT32)]


class _Schema(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)


class Destination(_Schema):
    to: str = Field(max_length=64)
    message_id: str | None = Field(default=None, alias="messageId", max_length=200)
    network_id: Int32 | None = Field(default=None, alias="networkId")


class Language(_Schema):
    language_code: Literal["NONE", "TR", "ES", "PT", "AUTODETECT"] | None = Field(default=None, alias="languageCode")
    single_shift: bool | None = Field(default=None, alias="singleShift")
    locking_shift: bool | None = Field(default=None, alias="lockingShift")


class Content(_Schema):
    """``SmsMessageContent``: oneOf text (``text``) or binary (``hex``); which one is checked after."""

    text: str | None = None
    transliteration: (
        Literal[
            "NONE", "TURKISH", "GREEK", "CYRILLIC", "SERBIAN_CYRILLIC", "CENTRAL_EUROPEAN", "BALTIC", "NON_UNICODE",
            "PORTUGUESE", "COLOMBIAN", "BULGARIAN_CYRILLIC", "ALL",
        ]
        | None
    ) = None  # fmt: skip
    language: Language | None = None
    hex: str | None = None
    data_coding: Int32 | None = Field(default=None, alias="dataCoding")
    esm_class: Int32 | None = Field(default=None, alias="esmClass")


class Platform(_Schema):
    entity_id: str | None = Field(default=None, alias="entityId", max_length=255)
    application_id: str | None = Field(default=None, alias="applicationId", max_length=255)


class ValidityPeriod(_Schema):
    # At least 1: Infobip documents no minimum (UNCONFIRMED); a validity of nothing is refused here.
    amount: int = Field(ge=1, le=_INT32)
    time_unit: Literal["SECONDS", "MINUTES", "HOURS"] = Field(default="MINUTES", alias="timeUnit")

    @property
    def seconds(self) -> int:
        return self.amount * {"SECONDS": 1, "MINUTES": 60, "HOURS": 3600}[self.time_unit]


class MessageOptions(_Schema):
    platform: Platform | None = None
    validity_period: ValidityPeriod | None = Field(default=None, alias="validityPeriod")
    delivery_time_window: dict[str, Any] | None = Field(default=None, alias="deliveryTimeWindow")
    campaign_reference_id: str | None = Field(default=None, alias="campaignReferenceId", max_length=255)
    regional: dict[str, Any] | None = None
    flash: bool | None = None


class DeliveryReporting(_Schema):
    url: str | None = None
    intermediate_report: bool | None = Field(default=None, alias="intermediateReport")
    notify: bool | None = None


class Webhooks(_Schema):
    delivery: DeliveryReporting | None = None
    content_type: str | None = Field(default=None, alias="contentType")
    callback_data: str | None = Field(default=None, alias="callbackData", max_length=4000)


class Message(_Schema):
    sender: str | None = None
    destinations: list[Destination] = Field(min_length=1)
    content: Content
    options: MessageOptions | None = None
    webhooks: Webhooks | None = None

    @property
    def report_url(self) -> str | None:
        return self.webhooks.delivery.url if self.webhooks and self.webhooks.delivery else None


class Schedule(_Schema):
    bulk_id: str | None = Field(default=None, alias="bulkId", max_length=100)
    send_at: str | None = Field(default=None, alias="sendAt")
    sending_speed_limit: dict[str, Any] | None = Field(default=None, alias="sendingSpeedLimit")


class RequestOptions(_Schema):
    schedule: Schedule | None = None
    tracking: dict[str, Any] | None = None
    include_sms_count_in_response: bool = Field(default=False, alias="includeSmsCountInResponse")
    conversion_tracking: dict[str, Any] | None = Field(default=None, alias="conversionTracking")


class SmsRequest(_Schema):
    messages: list[Message] = Field(min_length=1)
    options: RequestOptions | None = None


_TYPE_WORDS = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "bool_type": "must be a boolean",
    "list_type": "must be an array",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "missing": "must not be null",
    "too_short": "must not be empty",
}


def _path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _violation(error: Any) -> Violation:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "string_too_long":
        text = f"size must be between 0 and {ctx['max_length']}"
    elif kind == "greater_than_equal":
        text = f"must be greater than or equal to {ctx['ge']}"
    elif kind == "less_than_equal":
        text = f"must be less than or equal to {ctx['le']}"
    elif kind == "literal_error":
        text = f"must be one of {ctx['expected']}"
    else:
        text = _TYPE_WORDS.get(kind, error["msg"])
    # A null where an object or a string must be is "must not be null", as Java reads it.
    if error.get("input", ...) is None and kind in _TYPE_WORDS:
        text = "must not be null"
    return Violation(_path(error["loc"]), text)


def _semantic_violations(request: SmsRequest) -> list[Violation]:
    """The rules the schema states in prose or as oneOf, which the models above cannot."""
    found: list[Violation] = []
    for i, message in enumerate(request.messages):
        at = f"messages[{i}]"
        content = message.content
        if content.text is None and content.hex is None:
            found.append(Violation(f"{at}.content.text", "must not be null"))
        elif content.text is not None and content.hex is not None:
            found.append(Violation(f"{at}.content", "must be either text or binary content, not both"))
        webhooks = message.webhooks
        if webhooks and webhooks.delivery and webhooks.delivery.url is not None:
            if not _is_http_url(webhooks.delivery.url):
                found.append(Violation(f"{at}.webhooks.delivery.url", "must be a valid URL"))
        if webhooks and webhooks.content_type is not None:
            if webhooks.content_type == "application/xml":
                # Infobip can post XML reports; this emulator posts JSON only, and says so.
                found.append(Violation(f"{at}.webhooks.contentType", "application/xml is not emulated"))
            elif webhooks.content_type != "application/json":
                found.append(Violation(f"{at}.webhooks.contentType", "must be application/json or application/xml"))
    schedule = request.options.schedule if request.options else None
    if schedule and schedule.send_at is not None:
        found.append(Violation("options.schedule.sendAt", "scheduled sending is not emulated"))
    return found


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError when malformed
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and len(url) <= 2048


def read_request(body: Any) -> SmsRequest | list[Violation]:
    """The request, or every rule it breaks (never an exception, whatever JSON ``body`` is)."""
    if not isinstance(body, dict):
        return [Violation("messages", "the request body must be a JSON object")]
    try:
        request = SmsRequest.model_validate(body)
    except ValidationError as error:
        return [_violation(item) for item in error.errors(include_url=False)]
    return _semantic_violations(request) or request
