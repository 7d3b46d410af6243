"""Twilio's REST error body and the error codes the emulator answers with.

Twilio answers every REST error with the same JSON object::

    {"code": 21211, "message": "...", "more_info": "https://www.twilio.com/docs/errors/21211", "status": 400}

Messages here never echo a phone number back; the emulator's answers end up in
test logs, and a habit of keeping numbers out of logs is worth keeping there too.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse

# Short descriptions, as Twilio's error dictionary names them. Codes 30xxx are
# delivery errors: they appear as a message's error_code, not as an HTTP answer.
ERROR_MESSAGES: dict[int, str] = {
    20001: "Invalid parameter",
    20003: "Authenticate",
    20404: "The requested resource was not found",
    20429: "Too Many Requests",
    20500: "Internal Server Error",
    20503: "Service Unavailable",
    21211: "The 'To' number is not a valid phone number.",
    21602: "Message body is required.",
    21603: "A 'From' or 'MessagingServiceSid' parameter is required to send a message.",
    21604: "A 'To' phone number is required.",
    21606: (
        "The 'From' phone number provided is not a valid message-capable Twilio phone number "
        "for this destination/account."
    ),
    21609: "Invalid StatusCallback URL",
    21610: "Attempt to send to unsubscribed recipient",
    21612: "The 'To' phone number is not currently reachable via SMS.",
    21614: "'To' number is not a valid mobile number",
    21617: "The concatenated message body exceeds the 1600 character limit.",
    30001: "Queue overflow",
    30002: "Account suspended",
    30003: "Unreachable destination handset",
    30004: "Message blocked",
    30005: "Unknown destination handset",
    30006: "Landline or unreachable carrier",
    30007: "Message filtered",
    30008: "Unknown error",
    30400: "Parameters are not valid",
    30409: "This message cannot be canceled",
}


def describe(code: int) -> str:
    """Twilio's short description of ``code``, or a generic one for codes not listed."""
    return ERROR_MESSAGES.get(code, f"Twilio error {code}")


def error_body(status: int, code: int, message: str | None = None) -> dict[str, object]:
    return {
        "code": code,
        "message": message or describe(code),
        "more_info": f"https://www.twilio.com/docs/errors/{code}",
        "status": status,
    }


def error_response(
    status: int, code: int, message: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """A Twilio-shaped error answer."""
    return JSONResponse(error_body(status, code, message), status_code=status, headers=dict(headers or {}))
