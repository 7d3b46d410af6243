"""A notice's story as one page: every channel side by side, each from its request to its verdict.

Seed 003's question, "what happened to this notice on each channel, and why", answered in the order
it happened: the request (template and version, content hash, tenant, category, priority), each
attempt (its provider and why the route chose it, the policy version that admitted it, the submit's
answer, lookups, reports with the provider's time and their delay), the transitions with their
reasons, the verdict and what it rests on, the duplicates the ledger counted, the recipient's
requests and suppressions, and where the workflow's runs are in the Temporal Web UI. What is shown is
what ``herald.ledger.notices`` read; nothing is judged again here.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from herald.console.markup import Markup, el, fragment
from herald.console.pages import WebUi, clock, delay, moment, page
from herald.ledger.history import IntentHistory, RecordedAttempt, RecordedObservation
from herald.ledger.notices import ChannelStory, NoticeStory
from herald.privacy.masked import short_fingerprint

# The kinds a lookup or a poll records (herald.core.lifecycle.ObservationKind).
_LOOKUPS = frozenset({"found", "not_found", "unavailable"})


def story_page(story: NoticeStory, operator: str, web_ui: WebUi, texts: Mapping[str, Markup] | None = None) -> str:
    """The page; `texts`, by workflow id: each channel's "text as sent" (herald.console.sent_text)."""
    states = [
        el("span", f"{c.history.channel} ", el("span", c.state, class_=f"state {c.state}")) for c in story.channels
    ]
    return page(
        f"notice {story.business_key}",
        operator,
        el("h1", "notice ", el("code", story.business_key)),
        el("p", *_between(states, " · "), class_="summary"),
        el(
            "div",
            *(_channel(c, web_ui, (texts or {}).get(c.history.workflow_id)) for c in story.channels),
            class_="channels",
        ),
    )


def _between(items: list[Markup], separator: str) -> list[object]:
    joined: list[object] = []
    for index, item in enumerate(items):
        joined += [separator, item] if index else [item]
    return joined


def _channel(channel: ChannelStory, web_ui: WebUi, text: Markup | None) -> Markup:
    history = channel.history
    return el(
        "section",
        el("h2", history.channel, " ", el("span", channel.state, class_=f"state {channel.state}")),
        _verdict(channel),
        el("h3", "request"),
        _request(history, web_ui),
        text,
        el("h3", f"attempts ({len(history.attempts)})"),
        _attempts(history),
        _intent_observations(history),
        el("h3", f"transitions ({len(history.transitions)})"),
        _transitions(history),
        el("h3", "duplicates counted"),
        _duplicates(channel),
        el("h3", "the recipient's requests and suppressions"),
        _consent(channel),
        class_="channel",
        data_channel=history.channel,
    )


def _verdict(channel: ChannelStory) -> Markup:
    """Where the intent stands and the transition that put it there: the verdict and what it rests on."""
    if channel.state_since is None:
        return el("p", "no transition yet: recorded, waiting for its first attempt", class_="verdict")
    last = channel.history.transitions[-1]
    attempt = f" (attempt {last.attempt_number})" if last.attempt_number else ""
    return el(
        "p",
        el("strong", channel.state),
        f" since {moment(channel.state_since)}, by {last.source}{attempt}: ",
        channel.state_reason or "",
        class_="verdict",
    )


def _request(history: IntentHistory, web_ui: WebUi) -> Markup:
    priority = next((a.priority for a in history.attempts if a.priority is not None), None)
    rows = [
        ("workflow", el("code", history.workflow_id)),
        ("template", f"{history.template_id} v{history.template_version}"),
        ("content sha256", el("code", history.content_sha256, title="SHA-256 of the rendered content")),
        ("tenant", history.tenant),
        ("category", history.category or "-"),
        ("priority", "-" if priority is None else str(priority)),
        ("recipient", el("code", short_fingerprint(history.recipient_fingerprint), title="keyed fingerprint")
         if history.recipient_fingerprint else "-"),  # fmt: skip
        ("created", moment(history.created_at)),
        ("expires", moment(history.expires_at)),
        ("Temporal", fragment(
            el("a", "runs in the Web UI", href=web_ui.runs(history.workflow_id), class_="temporal-runs"),
            *([" · ", el("a", "first run's history", href=web_ui.run(history.workflow_id, history.first_run_id))]
              if history.first_run_id else []),
        )),
    ]  # fmt: skip
    return el("dl", *(fragment(el("dt", label), el("dd", value)) for label, value in rows), class_="facts")


def _attempts(history: IntentHistory) -> Markup:
    if not history.attempts:
        return el("p", "none", class_="muted")
    return el("ol", *(_attempt(a, history.observations) for a in history.attempts), class_="attempts")


def _attempt(attempt: RecordedAttempt, observations: list[RecordedObservation]) -> Markup:
    own = [o for o in observations if o.attempt_number == attempt.number]
    submit = next((o for o in own if o.source == "submit" and o.kind != "resubmitted"), None)
    lookups = sum(o.kind in _LOOKUPS for o in own)
    reports = sum(o.inbox_id is not None for o in own)
    policy = (
        f"policy v{attempt.policy_version} {attempt.policy_decision or ''}".strip()
        if attempt.policy_version is not None else "policy: not recorded"
    )  # fmt: skip
    queue = (
        f"priority {attempt.priority}" + (f", weight {attempt.fairness_weight:g}" if attempt.fairness_weight is not None else "")
        if attempt.priority is not None else None
    )  # fmt: skip
    facts = [
        ("provider", attempt.provider or "not handed to a provider"),
        ("route", attempt.route),
        ("why this provider", attempt.route_reason),
        ("admitted by", policy),
        ("queue", queue),
        ("submit", submit.kind if submit else "no answer recorded"),
        ("evidence", f"{lookups} lookups, {reports} reports, {len(own)} observations"),
    ]
    return el(
        "li",
        el("strong", f"attempt {attempt.number}"),
        " prepared ", moment(attempt.prepared_at), " ", el("code", attempt.attempt_ref, class_="muted"),
        el("dl", *(fragment(el("dt", k), el("dd", v)) for k, v in facts if v), class_="facts"),
        _observations(own, attempt),
        data_attempt=attempt.number,
    )  # fmt: skip


def _observations(own: list[RecordedObservation], attempt: RecordedAttempt | None) -> Markup:
    """The observations in the order they happened (a report can arrive before a submit's timeout
    is recorded), the ledger's order among those at the same moment."""
    if not own:
        return el("p", "no observation", class_="muted")
    own = sorted(own, key=lambda o: (o.observed_at, o.seq))
    head = el("tr", *(el("th", h) for h in ("at", "after", "by", "what", "provider", "report", "verdict")))
    rows = []
    for o in own:
        status = " ".join(
            part for part in (o.provider_status, f"code {o.error_code}" if o.error_code else None) if part
        )
        report = "-"
        if o.report_received_at is not None:
            report = f"stored {clock(o.report_received_at)}"
            if o.report_event_at is not None:
                report += "; " + provider_event(o.report_received_at, o.report_event_at)
        rows.append(
            el(
                "tr",
                el("td", clock(o.observed_at), class_="mono"),
                el("td", f"+{delay(o.observed_at - attempt.prepared_at)}" if attempt else "-", class_="mono"),
                el("td", o.source),
                el("td", el("strong", o.kind), " ", status, el("div", o.reason, class_="muted")),
                el("td", el("code", o.provider_id) if o.provider_id else "-", class_="id"),
                el("td", report),
                el("td", "applied" if o.applied else "ignored"),
                class_=None if o.applied else "ignored",
            )
        )
    return el("table", el("thead", head), el("tbody", *rows), class_="events")


def _intent_observations(history: IntentHistory) -> Markup | None:
    """Observations about the intent rather than one attempt (a policy deferral, a reused key)."""
    loose = [o for o in history.observations if o.attempt_number is None]
    if not loose:
        return None
    return fragment(el("h3", "about the intent"), _observations(loose, None))


def _transitions(history: IntentHistory) -> Markup:
    if not history.transitions:
        return el("p", "none yet", class_="muted")
    head = el("tr", *(el("th", h) for h in ("#", "at", "from", "to", "by", "reason")))
    rows = [
        el(
            "tr",
            el("td", t.seq),
            el("td", moment(t.at), class_="mono"),
            el("td", t.from_state),
            el("td", el("span", t.to_state, class_=f"state {t.to_state}")),
            el("td", t.source + (f" (attempt {t.attempt_number})" if t.attempt_number else "")),
            el("td", t.reason),
        )
        for t in history.transitions
    ]
    return el("table", el("thead", head), el("tbody", *rows), class_="transitions")


def _duplicates(channel: ChannelStory) -> Markup:
    if not channel.duplicates:
        return el("p", "none: no attempt was presumed absent and then seen", class_="muted")
    return el(
        "ul",
        *(
            el(
                "li",
                f"attempt {d.attempt_number} at {d.provider}: presumed not accepted ({d.cause}) at {moment(d.presumed_at)}, "
                f"seen {moment(d.first_seen_at)}; ",
                el("strong", "a duplicate sent") if d.sent_twice else "no second copy went out",
            )
            for d in channel.duplicates
        ),
    )


def _consent(channel: ChannelStory) -> Markup:
    if not channel.requests and not channel.suppressions:
        return el("p", "none on this channel", class_="muted")
    items = [
        el(
            "li",
            moment(r.requested_at),
            " ",
            el("strong", r.request),
            f" ({r.category})" if r.category else "",
            f" by {r.source}: {r.detail}",
            class_="request",
        )  # fmt: skip
        for r in channel.requests
    ]
    items += [
        el("li", moment(s.seen_at), " suppressed: ", el("strong", s.cause), f" ({s.detail})", class_="suppression")
        for s in channel.suppressions
    ]
    return el("ul", *items)


def provider_event(stored: datetime, event: datetime) -> str:
    """The provider's own time of a report, to its resolution: Twilio's carrier date gives minutes
    (RawDlrDoneDate, YYMMDDhhmm), so a time on the minute is shown as its minute, not as a delay
    that would be up to 59 s too long."""
    if event.second == 0 and event.microsecond == 0:
        return f"the provider's event in the minute {event:%H:%M} (its clock gives minutes)"
    return f"the provider's event {clock(event)}, {delay(stored - event)} before"
