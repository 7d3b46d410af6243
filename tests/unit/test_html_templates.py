"""E-mail templates with an HTML part: render data escaped by the engine in the HTML part and kept
verbatim in the text part; templates that would let data act as markup, code or a URL's scheme are
refused when published and when loaded, naming the rule."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from html.parser import HTMLParser
from itertools import count
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herald.intake import template_registry as templates
from herald.intake.requests import build_intent, parse_request
from herald.intake.template_html import HtmlRule
from herald.intake.template_registry import (
    MAX_EMAIL_HTML_CHARS,
    PublishRefused,
    TemplateError,
    load_template,
    parse_template,
    publish,
    render_message,
)
from tests.depth import examples
from tests.keys import SESSION_KEYRING as KEYRING

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SCRIPT = "<script>alert(1)</script>"
BREAKOUT = '"><img src=x onerror=alert(1)>'
RECEIPT = {"order_ref": "A-1", "amount": "12.50", "currency": "EUR"}
SEARCH = settings(
    max_examples=examples(300), deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
# The characters that make markup; data may put none of them into an HTML part, only references.
MARKUP = ("<", ">", '"', "'")
_BARE_AMPERSAND = re.compile(r"&(?!amp;|lt;|gt;|quot;|#x27;)")


def version_text(html: str, *, channel: str = "email", fields: tuple[str, ...] = ("x",)) -> str:
    """A template version whose text part names every field, with `html` as its HTML part."""
    header = [f"# A test version with an HTML part.\n# channel: {channel}\n"]
    if channel == "email":
        header.append("# subject: A test\n")
    header += [f"# field {name}: text max=200\n" for name in fields]
    text = " ".join("${" + name + "}" for name in fields)
    return "".join(header) + f"Hello {text}.\n# html:\n{html}\n"


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    """A copy of the shipped templates to publish into."""
    root = tmp_path / "templates"
    shutil.copytree(REPO / "herald" / "templates", root)
    return root


@contextmanager
def reading(root: Path) -> Iterator[None]:
    """load_template and render_message read `root` instead of the shipped templates."""
    shipped = templates._root
    templates._root = lambda: root  # type: ignore[assignment]
    templates.published.cache_clear()
    load_template.cache_clear()
    try:
        yield
    finally:
        templates._root = shipped  # type: ignore[assignment]
        templates.published.cache_clear()
        load_template.cache_clear()


def markup_counts(html: str) -> tuple[int, ...]:
    """How many markup characters and bare ampersands `html` holds: data must add none."""
    return (*(html.count(char) for char in MARKUP), len(_BARE_AMPERSAND.findall(html)))


class _Shape(HTMLParser):
    """The tags, attribute names and comments of a document, without its text and values."""

    def __init__(self) -> None:
        super().__init__()
        self.shape: list[tuple[str, ...]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.shape.append(("start", tag, *(name for name, _ in attrs)))

    def handle_endtag(self, tag: str) -> None:
        self.shape.append(("end", tag))

    def handle_comment(self, data: str) -> None:
        self.shape.append(("comment",))


def shape(html: str) -> list[tuple[str, ...]]:
    parser = _Shape()
    parser.feed(html)
    parser.close()
    return parser.shape


def decoded_texts(html: str) -> str:
    """Every text and attribute value of `html`, references decoded, as a browser reads them."""

    class Texts(HTMLParser):
        found: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.found += [value for _, value in attrs if value]

        def handle_data(self, data: str) -> None:
            self.found.append(data)

    parser = Texts()
    parser.found = []
    parser.feed(html)
    parser.close()
    return "\n".join(parser.found)


# ---- the shipped version -----------------------------------------------------------------------------


@pytest.mark.parametrize("hostile", [SCRIPT, BREAKOUT], ids=["script", "attribute-breakout"])
def test_hostile_render_data_is_escaped_in_the_html_part_and_verbatim_in_the_text_part(hostile: str) -> None:
    """order_receipt_email v2 puts the merchant in text and in a title attribute: escaped in the HTML
    part (the markup is the template's alone), as given in the text part."""
    rendered = render_message("order_receipt_email", 2, {**RECEIPT, "merchant": hostile}, channel="email")
    assert rendered.html_body is not None
    assert hostile in rendered.body
    assert hostile not in rendered.html_body
    escaped = hostile.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    assert rendered.html_body.count(escaped) == 2  # the text and the title attribute
    neutral = render_message("order_receipt_email", 2, {**RECEIPT, "merchant": "Acme"}, channel="email")
    assert markup_counts(rendered.html_body) == markup_counts(neutral.html_body or "")
    assert shape(rendered.html_body) == shape(neutral.html_body or "")
    assert "<img" not in rendered.html_body and "<script>alert" not in rendered.html_body


def test_the_text_only_version_renders_no_html_part() -> None:
    """v1 stays what it was: a text part only."""
    rendered = render_message("order_receipt_email", 1, {**RECEIPT, "merchant": "Acme"}, channel="email")
    assert rendered.html_body is None


def test_the_content_hash_covers_the_html_part_and_text_only_hashes_are_unchanged() -> None:
    """The intent's content hash changes with the HTML part; a text-only e-mail hashes as it always did."""
    request = {"business_key": "order_receipt:pay_1", "channel": "email", "recipient": "a@example.com",
               "template_id": "order_receipt_email", "render_data": {**RECEIPT, "merchant": "Acme"}}  # fmt: skip
    v1 = build_intent(parse_request({**request, "template_version": 1}), NOW, KEYRING)
    v2 = build_intent(parse_request({**request, "template_version": 2}), NOW, KEYRING)
    m1, m2 = v1.message, v2.message
    assert m1.html_body is None and m2.html_body is not None and m1.body == m2.body
    assert v2.content_sha256 != v1.content_sha256
    canonical = {"attachment_sha256": None, "body": m1.body, "subject": m1.subject}
    assert v1.content_sha256 == hashlib.sha256(json.dumps(canonical, separators=(",", ":")).encode()).hexdigest()
    with_html = json.dumps({**canonical, "html_body": m2.html_body}, sort_keys=True, separators=(",", ":"))
    assert v2.content_sha256 == hashlib.sha256(with_html.encode()).hexdigest()


# ---- publish: what is refused, naming the rule -------------------------------------------------------

REFUSED = [
    pytest.param('<script>var who = "${x}";</script>', HtmlRule.SCRIPT, id="in-script"),
    pytest.param("<style>p { color: ${x} }</style>", HtmlRule.SCRIPT_OR_STYLE, id="in-style"),
    pytest.param("<p title=${x}>hi</p>", HtmlRule.UNQUOTED_ATTRIBUTE, id="unquoted-attribute"),
    pytest.param("<p onclick=\"greet('${x}')\">hi</p>", HtmlRule.EVENT_HANDLER, id="event-handler"),
    pytest.param('<body onload="${x}">hi</body>', HtmlRule.EVENT_HANDLER, id="onload"),
    pytest.param('<a href="${x}">open</a>', HtmlRule.URL_START, id="href-start"),
    pytest.param('<img src="${x}">', HtmlRule.URL_START, id="src-start"),
    pytest.param('<a href=" ${x}">open</a>', HtmlRule.URL_START, id="href-after-a-space"),
    pytest.param('<a href="java${x}">open</a>', HtmlRule.URL_START, id="href-partial-scheme"),
    pytest.param('<a href="/${x}">open</a>', HtmlRule.URL_HOST, id="href-lone-slash"),
    pytest.param('<a href="https&#58${x}">open</a>', HtmlRule.URL_START, id="href-open-reference"),
    pytest.param('<form action="${x}"></form>', HtmlRule.FORM, id="form-action"),
    pytest.param('<a href="https://shop.example${x}">open</a>', HtmlRule.URL_HOST, id="href-host-continued"),
    pytest.param('<a href="https://${x}">open</a>', HtmlRule.URL_HOST, id="href-host-from-data"),
    pytest.param('<a href="https://${x}.shop.example/">open</a>', HtmlRule.URL_HOST, id="href-subdomain"),
    pytest.param('<a href="https://shop.example@${x}/">open</a>', HtmlRule.URL_HOST, id="href-after-userinfo"),
    pytest.param('<a href="https://${x}@shop.example/">open</a>', HtmlRule.URL_HOST, id="href-before-at"),
    pytest.param('<a href="https://shop.example:${x}/">open</a>', HtmlRule.URL_HOST, id="href-port"),
    pytest.param('<a href="https:${x}">open</a>', HtmlRule.URL_HOST, id="href-scheme-only"),
    pytest.param('<a href="https:/\\${x}">open</a>', HtmlRule.URL_HOST, id="href-backslash-authority"),
    pytest.param('<a href="//${x}">open</a>', HtmlRule.URL_HOST, id="network-path"),
    pytest.param('<a href="//shop.example${x}">open</a>', HtmlRule.URL_HOST, id="network-path-host-continued"),
    pytest.param('<a href="/\\${x}">open</a>', HtmlRule.URL_HOST, id="slash-backslash"),
    pytest.param('<img src="https://cdn.example${x}/a.png">', HtmlRule.URL_HOST, id="src-host-continued"),
    pytest.param('<a href="mailto:help@shop.example${x}">mail</a>', HtmlRule.URL_HOST, id="mailto-domain-continued"),
    pytest.param('<a href="tel:+1${x}">call</a>', HtmlRule.URL_HOST, id="tel-number-continued"),
    pytest.param('<a href="ftp://files.example/${x}">open</a>', HtmlRule.URL_START, id="another-scheme"),
    pytest.param('<img srcset="https://cdn.example/${x} 2x">', HtmlRule.URL_START, id="srcset"),
    pytest.param('<p style="color: ${x}">hi</p>', HtmlRule.STYLE_ATTRIBUTE, id="style-attribute"),
    pytest.param(
        '<meta http-equiv="refresh" content="0;url=https://x.example/${x}">', HtmlRule.META_REFRESH, id="meta"
    ),
    pytest.param('<meta name="description" content="${x}">', HtmlRule.HEAD_ATTRIBUTE, id="meta-content"),
    pytest.param("<${x}>hi", HtmlRule.TAG_NAME, id="tag-name"),
    pytest.param('<p ${x}="1">hi</p>', HtmlRule.TAG_NAME, id="attribute-name"),
    pytest.param("<p>hi</${x}>", HtmlRule.TAG_NAME, id="end-tag-name"),
    pytest.param("<!-- ${x} -->", HtmlRule.COMMENT, id="comment"),
    pytest.param("<!--[if mso]><p>${x}</p><![endif]-->", HtmlRule.COMMENT, id="conditional-comment"),
    pytest.param("<p>&${x};</p>", HtmlRule.UNPLACED, id="character-reference"),
    pytest.param("<p>$!{x}</p>", HtmlRule.PLACEHOLDER_SYNTAX, id="raw-marker"),
    pytest.param("<p>${x|safe}</p>", HtmlRule.PLACEHOLDER_SYNTAX, id="safe-filter"),
    pytest.param("<p>{{{ x }}} ${x}</p>", HtmlRule.PLACEHOLDER_SYNTAX, id="triple-braces"),
    pytest.param("<p>{% autoescape false %}${x}</p>", HtmlRule.PLACEHOLDER_SYNTAX, id="autoescape-off"),
    pytest.param("<svg><text>${x}</text></svg>", HtmlRule.DISALLOWED_ELEMENT, id="svg"),
    pytest.param("<noscript><p>${x}</p></noscript>", HtmlRule.DISALLOWED_ELEMENT, id="noscript"),
    pytest.param("<script/>${x}", HtmlRule.AMBIGUOUS_MARKUP, id="self-closing-script"),
    pytest.param("<style></ style>${x}</style>", HtmlRule.AMBIGUOUS_MARKUP, id="spaced-end-tag"),
    pytest.param("<!-- --!><p>${x}</p>", HtmlRule.AMBIGUOUS_MARKUP, id="bang-comment-end"),
    pytest.param('<a title="${x}>open</a>', HtmlRule.AMBIGUOUS_MARKUP, id="unclosed-quote"),
    pytest.param('<title><a href="</title><a href=${x}>"></title>', HtmlRule.RAW_TEXT_MARKUP, id="markup-in-title"),
    pytest.param("<p>1 < 2 ${x}</p>", HtmlRule.TEXT_LT, id="bare-less-than"),
    pytest.param("<![CDATA[${x}]]>", HtmlRule.DECLARATION, id="cdata"),
]


@pytest.mark.parametrize(("html", "rule"), REFUSED)
def test_publish_refuses_a_placeholder_where_escaping_is_not_enough_naming_the_rule(
    registry: Path, html: str, rule: HtmlRule
) -> None:
    """Each unsafe context is refused by publish() with the rule's own words, and nothing is written."""
    before = (registry / "published.json").read_text()
    with pytest.raises(PublishRefused) as refused:
        publish("html_probe", 1, version_text(html), root=registry)
    assert rule.value in str(refused.value), str(refused.value)
    assert str(refused.value).startswith("template_id: html_probe v1: html part: ")
    assert not (registry / "html_probe").exists()
    assert (registry / "published.json").read_text() == before
    with pytest.raises(TemplateError, match=re.escape(rule.value)):
        parse_template("html_probe", 1, version_text(html))


SAFE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>For ${x}</title>
<style>a { color: #036 }</style></head>
<body>
<!--[if mso]><p>Outlook</p><![endif]-->
<p class="greeting" title="${x}" data-who='${x}'>Hello ${x} &amp; welcome, $$5 off.</p>
<a href="https://shop.example/u/${x}?ref=${x}#${x}">profile</a> <a href="mailto:${x}">mail</a>
<a href="/orders/${x}">order</a> <img src="https://cdn.example/${x}.png" alt="${x}"><br/>
<a href="https://shop.example?o=${x}">query</a> <a href="https://shop.example#${x}">fragment</a>
<a href="mailto:help@shop.example?subject=Order%20${x}">ask</a> <a href="tel:${x}">call</a>
</body></html>"""


@pytest.mark.parametrize("hostile", [SCRIPT, BREAKOUT, "' onmouseover='alert(1)", "&lt;b&gt; & &amp;"])
def test_a_safe_template_is_published_and_renders_every_value_escaped(registry: Path, hostile: str) -> None:
    """Text, title, quoted attributes and URLs after a fixed scheme or path are accepted; each value
    lands escaped (no markup character added, the same tags) and decodes back to the data."""
    assert publish("html_probe", 1, version_text(SAFE), root=registry) is True
    with reading(registry):
        rendered = render_message("html_probe", 1, {"x": hostile}, channel="email")
        neutral = render_message("html_probe", 1, {"x": "x"}, channel="email")
    assert rendered.body == f"Hello {hostile}."
    assert rendered.html_body is not None and neutral.html_body is not None
    assert markup_counts(rendered.html_body) == markup_counts(neutral.html_body)
    assert shape(rendered.html_body) == shape(neutral.html_body)
    assert hostile in decoded_texts(rendered.html_body)
    assert "$5 off" in rendered.html_body


def test_an_sms_template_cannot_have_an_html_part(registry: Path) -> None:
    """The HTML part is an e-mail's: an SMS version with one is refused by name."""
    with pytest.raises(PublishRefused, match="only an e-mail template has an HTML part"):
        publish("html_probe", 1, version_text("<p>${x}</p>", channel="sms"), root=registry)


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("# html: <p>${x}</p>", "stands alone on its line"),
        ("# html:\n   \n", "the HTML part after '# html:' is empty"),
    ],
)
def test_the_html_marker_stands_alone_and_starts_a_part(registry: Path, text: str, rule: str) -> None:
    """'# html:' is a line of its own followed by the part; anything else is refused naming the rule."""
    version = version_text("<p>x</p>").split("# html:")[0] + text
    with pytest.raises(PublishRefused, match=re.escape(rule)):
        publish("html_probe", 1, version, root=registry)


def test_no_field_kind_skips_escaping(registry: Path) -> None:
    """Data cannot be declared markup: a field kind such as html or raw does not exist."""
    for kind in ("html", "raw", "safe"):
        text = version_text("<p>${x}</p>").replace("# field x: text max=200", f"# field x: {kind}")
        with pytest.raises(PublishRefused, match="not a field declaration"):
            publish("html_probe", 1, text, root=registry)


def test_load_refuses_an_unsafe_html_part_even_when_its_hash_is_recorded(registry: Path) -> None:
    """A file placed and recorded by hand, past publish(), is refused when loaded, not rendered."""
    unsafe = version_text('<a href="${x}">open</a>')
    folder = registry / "html_probe"
    folder.mkdir()
    (folder / "v1.txt").write_text(unsafe)
    record = json.loads((registry / "published.json").read_text())
    record["html_probe/v1"] = hashlib.sha256(unsafe.encode()).hexdigest()
    (registry / "published.json").write_text(json.dumps(record))
    with reading(registry), pytest.raises(TemplateError, match=re.escape(HtmlRule.URL_START.value)):
        render_message("html_probe", 1, {"x": "javascript:alert(1)"}, channel="email")


def test_an_html_part_rendered_over_its_bound_is_refused(registry: Path) -> None:
    """The rendered HTML part is bounded like the text part: escaping's growth counts."""
    html = "<p>" + "${x}" * 499 + "</p>"
    assert publish("html_probe", 1, version_text(html), root=registry)
    with reading(registry):
        render_message("html_probe", 1, {"x": "a" * 200}, channel="email")  # 99,807 characters: within
        with pytest.raises(TemplateError, match=f"rendered HTML part exceeds {MAX_EMAIL_HTML_CHARS} characters"):
            render_message("html_probe", 1, {"x": "&" * 200}, channel="email")


# ---- search: random data, random templates -----------------------------------------------------------

hostile_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=60) | st.sampled_from(
    [SCRIPT, BREAKOUT, "javascript:alert(1)", "' onmouseover='x", "&amp;&lt;", "${x}", "$$", "</title>", "-->",
     "<!--", "]]>", "\"'<>&", "a" * 60]
)  # fmt: skip


@SEARCH
@given(value=hostile_text)
def test_random_render_data_adds_no_markup_character_to_the_shipped_html_part(value: str) -> None:
    """Whatever the merchant's name, the HTML part holds the template's markup characters only (data's
    '<', '>', quotes and '&' arrive as references) and the same tags; the text part holds the name as given."""
    data = {**RECEIPT, "merchant": value}
    rendered = render_message("order_receipt_email", 2, data, channel="email")
    neutral = render_message("order_receipt_email", 2, {**RECEIPT, "merchant": "Acme"}, channel="email")
    assert value in rendered.body
    assert rendered.html_body is not None and neutral.html_body is not None
    assert markup_counts(rendered.html_body) == markup_counts(neutral.html_body)
    assert shape(rendered.html_body) == shape(neutral.html_body)


# Pieces of HTML, each with a placeholder somewhere; the safe ones may stand anywhere in an accepted
# template, the unsafe ones must get it refused. Noise is markup characters around a placeholder.
SAFE_PIECES = [
    "<p>${x}</p>", '<p title="${x}">t</p>', "<p title='${x}'>t</p>", '<a href="https://e.example/${x}">a</a>',
    '<a href="mailto:${x}">m</a>', "<title>${x}</title>", '<a href="https://e.example?q=${x}">q</a>', "plain ${x} text",
    '<img alt="${x}" src="/i/${x}.png">', "<b>${x}</b><br>", '<td data-x="${x}">${x}</td>', "&amp;${x}",
]  # fmt: skip
UNSAFE_PIECES = [str(param.values[0]) for param in REFUSED]
noise = st.lists(
    st.sampled_from([*"<>\"'=/ !-&;:ab#", "${x}", "<a ", "<p>", "</p>", "href=", "on", "<!--", "-->"]), max_size=12
).map("".join)


@SEARCH
@given(
    pieces=st.lists(st.sampled_from(SAFE_PIECES) | st.sampled_from(UNSAFE_PIECES) | noise, min_size=1, max_size=5),
    value=hostile_text,
)
def test_a_random_html_part_is_refused_by_rule_or_renders_random_data_as_text(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[str], value: str
) -> None:
    """Any HTML part: publish refuses it naming a rule (always, when an unsafe piece is in it), or it
    renders any data with no markup character added and the same tags as with harmless data."""
    html = "".join(pieces)
    if "${x}" not in html:
        html += "<p>${x}</p>"
    try:
        parse_template("html_probe", 1, version_text(html))
    except TemplateError as refused:
        assert "html part: " in refused.rule and any(rule.value in refused.rule for rule in HtmlRule), refused.rule
        return
    assert not any(piece in UNSAFE_PIECES for piece in pieces), html
    root = _search_registry(tmp_path_factory)
    version = next(_versions)
    assert publish("html_probe", version, version_text(html), root=root)
    with reading(root):
        rendered = render_message("html_probe", version, {"x": value}, channel="email")
        neutral = render_message("html_probe", version, {"x": "x"}, channel="email")
    assert rendered.html_body is not None and neutral.html_body is not None
    assert markup_counts(rendered.html_body) == markup_counts(neutral.html_body), html
    assert shape(rendered.html_body) == shape(neutral.html_body), html


_versions = count(1)
_roots: dict[str, Path] = {}


def _search_registry(factory: pytest.TempPathFactory) -> Path:
    """One registry for the whole search (each accepted example is published as a new version)."""
    if "root" not in _roots:
        root = factory.mktemp("search") / "templates"
        shutil.copytree(REPO / "herald" / "templates", root)
        _roots["root"] = root
    return _roots["root"]


# ---- fixed markup: what no template may hold, placeholder or not -------------------------------------

REFUSED_FIXED = [
    pytest.param("<script>alert(1)</script>", HtmlRule.SCRIPT, id="script"),
    pytest.param('<SCRIPT src="https://cdn.example/x.js"></SCRIPT>', HtmlRule.SCRIPT, id="script-src-upper"),
    pytest.param('<a href="javascript:alert(1)">x</a>', HtmlRule.URL_SCHEME, id="javascript"),
    pytest.param('<a href="JaVaScRiPt:alert(1)">x</a>', HtmlRule.URL_SCHEME, id="javascript-mixed-case"),
    pytest.param('<a href="java&#x09;script:alert(1)">x</a>', HtmlRule.URL_SCHEME, id="javascript-tab-reference"),
    pytest.param('<a href="java\tscript:alert(1)">x</a>', HtmlRule.URL_SCHEME, id="javascript-raw-tab"),
    pytest.param('<a href="jav&#10;ascript:alert(1)">x</a>', HtmlRule.URL_SCHEME, id="javascript-newline-reference"),
    pytest.param('<a href="&#106;avascript:alert(1)">x</a>', HtmlRule.URL_SCHEME, id="javascript-decimal-reference"),
    pytest.param('<a href="&#x6A;avascript:alert(1)">x</a>', HtmlRule.URL_SCHEME, id="javascript-hex-reference"),
    pytest.param('<a href="&#0000106avascript:alert(1)">x</a>', HtmlRule.URL_SCHEME, id="javascript-padded-bare"),
    pytest.param('<a href="javascript&colon;alert(1)">x</a>', HtmlRule.URL_SCHEME, id="javascript-named-colon"),
    pytest.param('<a href=" javascript:alert(1)">x</a>', HtmlRule.URL_SCHEME, id="javascript-leading-space"),
    pytest.param('<a href="\x01javascript:alert(1)">x</a>', HtmlRule.URL_SCHEME, id="javascript-leading-control"),
    pytest.param("<a href=javascript:alert(1)>x</a>", HtmlRule.URL_SCHEME, id="javascript-unquoted"),
    pytest.param('<a href="vbscript:msgbox(1)">x</a>', HtmlRule.URL_SCHEME, id="vbscript"),
    pytest.param('<a href="data:text/html;base64,PHNjcmlwdD4=">x</a>', HtmlRule.URL_SCHEME, id="data-link"),
    pytest.param('<img src="data:image/png;base64,iVBORw0KGgo=">', HtmlRule.URL_SCHEME, id="data-image"),
    pytest.param('<img src="DATA:image/svg+xml,<svg>">', HtmlRule.URL_SCHEME, id="data-upper"),
    pytest.param('<table background="javascript:alert(1)"><tr><td>x</td></tr></table>', HtmlRule.URL_SCHEME,
                 id="background"),  # fmt: skip
    pytest.param('<img srcset="https://cdn.example/a.png 1x, javascript:alert(1) 2x">', HtmlRule.URL_SCHEME,
                 id="srcset"),  # fmt: skip
    pytest.param('<img src="https://cdn.example/a.png" onerror="alert(1)">', HtmlRule.EVENT_HANDLER, id="onerror"),
    pytest.param('<body onload="go()"><p>x</p></body>', HtmlRule.EVENT_HANDLER, id="onload"),
    pytest.param('<p OnMouseOver="go()">x</p>', HtmlRule.EVENT_HANDLER, id="onmouseover-mixed-case"),
    pytest.param('<a href="https://shop.example/" onclick>x</a>', HtmlRule.EVENT_HANDLER, id="handler-without-value"),
    pytest.param('<meta http-equiv="refresh" content="0;url=https://evil.example/">', HtmlRule.META_REFRESH,
                 id="meta-refresh"),  # fmt: skip
    pytest.param('<meta http-equiv="REFRESH" content="5">', HtmlRule.META_REFRESH, id="meta-refresh-upper"),
    pytest.param('<meta http-equiv="&#114;efresh" content="0;url=https://evil.example/">', HtmlRule.META_REFRESH,
                 id="meta-refresh-reference"),  # fmt: skip
    pytest.param("<meta http-equiv=Refresh content=0;url=https://evil.example/>", HtmlRule.META_REFRESH,
                 id="meta-refresh-unquoted"),  # fmt: skip
    pytest.param(
        '<form action="https://evil.example/login" method="post"><input type="password" name="pw">'
        "<button>Sign in</button></form>", HtmlRule.FORM, id="password-form",
    ),
    pytest.param('<input type="password" name="pw">', HtmlRule.FORM, id="input"),
    pytest.param("<BUTTON>Pay</BUTTON>", HtmlRule.FORM, id="button"),
    pytest.param("<textarea>Your card number</textarea>", HtmlRule.FORM, id="textarea"),
    pytest.param("<select><option>1</option></select>", HtmlRule.FORM, id="select"),
    pytest.param('<iframe src="https://evil.example/"></iframe>', HtmlRule.DISALLOWED_ELEMENT, id="iframe"),
    pytest.param('<object data="https://evil.example/x.swf"></object>', HtmlRule.DISALLOWED_ELEMENT, id="object"),
    pytest.param('<embed src="https://evil.example/x.swf">', HtmlRule.DISALLOWED_ELEMENT, id="embed"),
    pytest.param('<applet code="X.class"></applet>', HtmlRule.DISALLOWED_ELEMENT, id="applet"),
    pytest.param('<frameset><frame src="https://evil.example/"></frameset>', HtmlRule.DISALLOWED_ELEMENT,
                 id="frameset"),  # fmt: skip
    pytest.param('<base href="https://evil.example/">', HtmlRule.DISALLOWED_ELEMENT, id="base"),
]


@pytest.mark.parametrize(("construct", "rule"), REFUSED_FIXED)
def test_publish_refuses_dangerous_fixed_markup_without_any_placeholder_in_it(
    registry: Path, construct: str, rule: HtmlRule
) -> None:
    """Script, a javascript:/data:/vbscript: URL however it is spelled, an event handler, a meta refresh, a
    form or form control, an embedded object or frame: refused by publish() and at load naming the rule and
    the line, though the only placeholder is an ordinary one in a paragraph of its own."""
    html = f"<p>Hello ${{x}}</p>\n{construct}"
    before = (registry / "published.json").read_text()
    with pytest.raises(PublishRefused) as refused:
        publish("html_probe", 1, version_text(html), root=registry)
    assert rule.value in str(refused.value), str(refused.value)
    assert str(refused.value).startswith("template_id: html_probe v1: html part: ")
    if rule is not HtmlRule.DISALLOWED_ELEMENT:  # its refusals predate the line number
        assert " on line 2: " in str(refused.value), str(refused.value)
    assert (registry / "published.json").read_text() == before and not (registry / "html_probe").exists()
    with pytest.raises(TemplateError, match=re.escape(rule.value)):
        parse_template("html_probe", 1, version_text(html))


# Ordinary e-mail markup: layout tables, inline CSS, images and links over https, mailto, tel, sms, cid.
SAFE_FIXED = [
    '<table role="presentation" width="100%" cellpadding="0" cellspacing="0" border="0" style="max-width:600px">'
    '<tr><td align="center" bgcolor="#f4f4f4" style="padding:24px;font-family:Arial,sans-serif">x</td></tr></table>',
    '<img src="https://cdn.shop.example/logo.png" width="120" height="40" alt="Shop" style="display:block;border:0">',
    '<img src="cid:logo@shop.example" alt="Shop">',
    '<img srcset="https://cdn.example/a.png 1x, https://cdn.example/a@2x.png 2x" src="https://cdn.example/a.png">',
    '<a href="https://shop.example/orders?ref=mail&amp;utm_source=herald" target="_blank">Your order</a>',
    '<a href="HTTPS://Shop.Example/help">Help</a>',
    '<a href="mailto:help@shop.example?subject=Question">Write to us</a>',
    '<a href="tel:+15550100">Call us</a> <a href="sms:+15550100">Text us</a>',
    '<a href="#top">Back to top</a> <a href="/account">Account</a> <a href="">(none)</a>',
    "<center><font face=\"Arial\" color=\"#333333\" size=\"2\">Centred</font></center>",
    "<style>@media only screen and (max-width:600px){.col{width:100%!important}} a{color:#036}</style>",
    "<!--[if mso]><table><tr><td><![endif]--><div>Outlook</div><!--[if mso]></td></tr></table><![endif]-->",
    '<p style="margin:0 0 12px;color:#333;background:url(https://cdn.example/bg.png)">Styled</p>',
    '<meta name="viewport" content="width=device-width, initial-scale=1"><meta http-equiv="Content-Type" '
    'content="text/html; charset=utf-8">',
    "<ul><li>One</li><li>Two</li></ul><hr><blockquote cite=\"https://shop.example/quote\">Said</blockquote>",
    '<div class="onboarding" data-once="1" aria-label="done">Not a handler: the attribute name decides</div>',
]  # fmt: skip


@pytest.mark.parametrize("piece", SAFE_FIXED)
def test_ordinary_email_markup_is_published(registry: Path, piece: str) -> None:
    """Tables, inline styles, <style> and conditional comments, images over https or cid:, links over https,
    mailto, tel and sms, relative and fragment links, viewport and content-type meta: published as written."""
    assert publish("html_probe", 1, version_text(f"{piece}\n<p>${{x}}</p>"), root=registry) is True


def test_every_shipped_template_still_loads() -> None:
    """Each published version under herald/templates (its HTML parts included) passes the rules at load."""
    shipped = templates.available_templates()
    assert "order_receipt_email" in shipped and "class_promo_email" in shipped
    for template_id, versions in shipped.items():
        for version in versions:
            assert load_template(template_id, version).version == version


# ---- search: dangerous constructs in random spellings ------------------------------------------------


def _any_case(word: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
        lambda upper: "".join(char.upper() if up else char.lower() for char, up in zip(word, upper, strict=True))
    )


@st.composite
def _spelled_char(draw: st.DrawFn, char: str) -> str:
    """One character of an attribute value as a browser decodes it back: itself (any case for a letter), or
    a decimal or hexadecimal reference, zero-padded or not; ':' also as &colon;."""
    code = ord(char.lower()) if draw(st.booleans()) else ord(char)
    pad = "0" * draw(st.integers(0, 3))
    choices = [
        draw(_any_case(char)),
        f"&#{pad}{code};",
        f"&#{draw(st.sampled_from('xX'))}{pad}{format(code, draw(st.sampled_from(['x', 'X'])))};",
    ]
    if char == ":":
        choices.append("&colon;")
    return draw(st.sampled_from(choices))


# What the URL parser drops: tabs and line ends anywhere, C0 controls and spaces before the URL; raw or
# as references.
_DROPPED_INSIDE = ["\t", "\n", "\r", "&#9;", "&#x09;", "&Tab;", "&#10;", "&#x0A;", "&NewLine;", "&#13;"]
_DROPPED_BEFORE = [" ", "\t", "\x01", "\x1f", "&#32;", "&#x20;", "&#0;", "&#x1F;"]


@st.composite
def _spelled_scheme(draw: st.DrawFn) -> str:
    """javascript:, vbscript: or data: spelled any way a browser still reads as that scheme."""
    scheme = draw(st.sampled_from(["javascript:", "vbscript:", "data:"]))
    spelled = "".join(draw(st.lists(st.sampled_from(_DROPPED_BEFORE), max_size=2)))
    for char in scheme:
        spelled += draw(_spelled_char(char))
        if draw(st.integers(0, 4)) == 0:
            spelled += draw(st.sampled_from(_DROPPED_INSIDE))
    rest = {"javascript:": "alert(1)", "vbscript:": "msgbox(1)", "data:": "text/html;base64,PHNjcmlwdD4="}
    return spelled + rest[scheme.replace("&colon;", ":")]


_TAG_SPACE = st.sampled_from([" ", "  ", "\t", "\n", "\x0c", "\r\n"])


@st.composite
def _attribute(draw: st.DrawFn, name: str, value: str) -> str:
    """` name=value` with random whitespace and quotes (unquoted only where the value allows it)."""
    quotes = ['"', "'"] + ([""] if value and not re.search(r"[\s\"'=<>`]", value) else [])
    quote = draw(st.sampled_from(quotes))
    if quote and quote in value:
        quote = "'" if quote == '"' else '"'
    return f"{draw(_TAG_SPACE)}{draw(_any_case(name))}={quote}{value}{quote}"


@st.composite
def _dangerous(draw: st.DrawFn) -> str:
    """One dangerous construct, fixed (no placeholder), in random case, whitespace and reference spellings."""
    kind = draw(st.sampled_from(["script", "url", "handler", "refresh", "form", "frame"]))
    if kind == "script":
        attrs = draw(st.sampled_from(["", draw(_attribute("src", "https://cdn.example/x.js"))]))
        return f"<{draw(_any_case('script'))}{attrs}>alert(1)</{draw(_any_case('script'))}>"
    if kind == "url":
        tag, name = draw(st.sampled_from([("a", "href"), ("img", "src"), ("table", "background"), ("td", "background"),
                                          ("img", "srcset"), ("area", "href"), ("blockquote", "cite")]))  # fmt: skip
        return f"<{draw(_any_case(tag))}{draw(_attribute(name, draw(_spelled_scheme())))}>x</{tag}>"
    if kind == "handler":
        event = draw(st.sampled_from(["onerror", "onload", "onclick", "onmouseover", "onfocus", "onanimationstart"]))
        tag = draw(st.sampled_from(["img", "body", "p", "a", "div", "td"]))
        handler = draw(_attribute(event, "alert(1)")) if draw(st.booleans()) else f" {draw(_any_case(event))}"
        return f"<{tag}{draw(_attribute('title', 'hi'))}{handler}>x</{tag}>"
    if kind == "refresh":
        value = "".join(draw(_spelled_char(char)) for char in "refresh")
        target = draw(_attribute("content", "0;url=https://evil.example/"))
        return f"<{draw(_any_case('meta'))}{draw(_attribute('http-equiv', value))}{target}>"
    if kind == "form":
        tag = draw(st.sampled_from(["form", "input", "button", "textarea", "select"]))
        attrs = draw(_attribute("type", "password")) + draw(_attribute("name", "pw"))
        return f"<{draw(_any_case(tag))}{attrs}>x</{tag}>"
    tag = draw(st.sampled_from(["object", "embed", "applet", "iframe", "frame", "frameset"]))
    return f"<{draw(_any_case(tag))}{draw(_attribute('src', 'https://evil.example/'))}></{tag}>"


_SAFE_FIXED_PIECES = SAFE_FIXED + ["<p>${x}</p>", '<a href="https://shop.example/o/${x}">o</a>', "<br>", "\n"]


@SEARCH
@given(
    before=st.lists(st.sampled_from(_SAFE_FIXED_PIECES), max_size=3),
    construct=_dangerous(),
    after=st.lists(st.sampled_from(_SAFE_FIXED_PIECES), max_size=3),
)
def test_a_dangerous_construct_in_any_spelling_among_safe_markup_is_always_refused(
    before: list[str], construct: str, after: list[str]
) -> None:
    """Script, a javascript:/vbscript:/data: URL (any case, tabs and line ends inside, controls or spaces
    before, any letter or the ':' as a decimal, hexadecimal or named reference), an event handler, a meta
    refresh, a form control or an embedded object or frame, anywhere among ordinary markup: always refused,
    naming a rule."""
    html = "".join(before) + construct + "".join(after) + "<p>${x}</p>"
    with pytest.raises(TemplateError) as refused:
        parse_template("html_probe", 1, version_text(html))
    assert any(rule.value in refused.value.rule for rule in HtmlRule), refused.value.rule


@SEARCH
@given(pieces=st.lists(st.sampled_from(_SAFE_FIXED_PIECES), min_size=1, max_size=8))
def test_ordinary_email_markup_in_any_order_is_accepted(pieces: list[str]) -> None:
    """Any sequence of the safe corpus (with a placeholder in text and in an https path) is accepted."""
    parse_template("html_probe", 1, version_text("".join(pieces) + "<p>${x}</p>"))
