"""The pages a person sees at /unsubscribe/<token>: the confirmation, the answer, the refusals.

Small, static and escaped: nothing in them comes from the request, and the only variable parts (the
category's name, a refusal's rule) are ours and escaped all the same. No address, no fingerprint, no
token: the page may be cached by a proxy or shown on a shared screen, and the form posts back to
the URL it was served from (no ``action``), so the token is not even repeated in the page.

Every page is sent with headers that keep the link to this page: no caching (a person who
unsubscribed must not see the button again from a cache), no referrer (the token is in the URL), no
indexing, no framing, no script or outside resource at all (CSP), and forms only to ourselves.
"""

from __future__ import annotations

from html import escape

from starlette.responses import HTMLResponse

from herald.core.send_policy import Category

PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Robots-Tag": "noindex, nofollow",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
    ),
}

_STYLE = "body{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem;line-height:1.5}"


def _page(title: str, body: str, status_code: int) -> HTMLResponse:
    html = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><h1>{escape(title)}</h1>{body}</body></html>"
    )
    return HTMLResponse(html, status_code=status_code, headers=PAGE_HEADERS)


def _what(category: Category) -> str:
    return f"{category.value} e-mail"


def confirmation(category: Category) -> HTMLResponse:
    """GET: what the link would do, and a button that does it. Changes nothing: a scanner that
    fetches every link in a message must not unsubscribe anyone."""
    return _page(
        "Unsubscribe?",
        f"<p>Stop receiving {escape(_what(category))} from us at this address?</p>"
        # The button posts RFC 8058's pair, urlencoded (the button itself has no name, so it adds no field).
        '<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click">'
        '<button type="submit">Unsubscribe</button></form>',
        200,
    )


def unsubscribed(category: Category) -> HTMLResponse:
    """POST, recorded (now or by an earlier post of the same link)."""
    return _page(
        "You are unsubscribed",
        f"<p>You will receive no more {escape(_what(category))} from us at this address. "
        "A message already on its way may still arrive.</p>",
        200,
    )


def refused(reason: str, status_code: int) -> HTMLResponse:
    """A link that unsubscribes nobody (forged, altered, expired, not ours), or a body too large."""
    return _page(
        "This unsubscribe link does not work",
        f"<p>{escape(reason)}.</p><p>Nothing was changed. The e-mail it came in may be too old, or "
        "the link was copied incompletely; a newer e-mail from us carries a fresh one.</p>",
        status_code,
    )


# What a POST must carry (RFC 8058 section 3.2); the refusal names the pair and both encodings.
NOT_ONE_CLICK = (
    "request body: must be the one form field List-Unsubscribe=One-Click (RFC 8058), "
    "as application/x-www-form-urlencoded or multipart/form-data"
)


def not_one_click() -> HTMLResponse:
    """POST without the one-click pair (empty, another value, another encoding): 400, nothing recorded."""
    return _page(
        "This request unsubscribes nobody",
        f"<p>{escape(NOT_ONE_CLICK)}.</p><p>Nothing was changed. Open the link from the e-mail and press "
        "its Unsubscribe button, or use your mail program's Unsubscribe button.</p>",
        400,
    )


def not_recorded() -> HTMLResponse:
    """POST, but the ledger did not take it in time: nothing is recorded, so asking again is safe."""
    return _page(
        "Please try again",
        "<p>We could not record your request just now. Nothing was changed; please try again in a minute.</p>",
        503,
    )
