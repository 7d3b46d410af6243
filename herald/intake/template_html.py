"""An e-mail template's HTML part: where its placeholders may stand, and how render data enters it.

Render data reaches the HTML part only through ``escape_value`` (``html.escape(..., quote=True)``:
``& < > " '`` become references), applied by ``herald.intake.template_registry.render_message`` to every value; the
template language has no raw or "safe" form, so no data is ever inserted as markup. Escaping keeps
data inside the text or the quoted attribute value it was put in, and nothing more: it does not stop
``javascript:`` at the start of a URL, code in an event handler or ``<script>``, CSS in a ``style``, or
a space in an unquoted value starting a new attribute. So ``check_html_part`` refuses, when a
version is published and again whenever it is loaded, every template that places a placeholder
where escaped data could still do harm (``HtmlRule``): only text, the content of ``<title>``, and
quoted values of ordinary attributes (a URL attribute only after fixed text that decides where the
link goes: ``https://host/...``, right after ``mailto:``, a path) may hold one.

The markup around the placeholders is held to a rule of its own, whoever wrote it: the author of a
template is not the only one it must be safe from (a template is data in a repository, a marketing
tool pastes HTML in, an account that can publish can be taken over), and a mail client that runs or
submits what a template holds turns one bad version into every recipient's problem. So fixed
markup may hold no ``<script>``, no form or form control (a password form in a receipt is phishing),
no event-handler attribute, no ``<meta http-equiv="refresh">``, no embedded object or frame, and no
URL whose scheme is not one of ``SAFE_SCHEMES`` (``javascript:``, ``data:``, ``vbscript:``...).
A scheme counts only when written plainly: a character reference, a space or a control character
before a URL's first ``:``, ``/``, ``?`` or ``#`` is refused, so ``JaVaScRiPt:``, ``java&#x09;script:``
and ``&#106;avascript:`` cannot pass as a path. CSS, tables, inline styles without placeholders,
images and links over https, mailto and tel stay what e-mail is made of.

How a placeholder's context is found: each is replaced by a letters-and-digits marker and the
result read with the stdlib ``html.parser.HTMLParser``; every start tag it reports is read again by
``_scan_start_tag``, which follows the HTML5 tokenizer's tag states, and the two must agree on the
tag's extent and its attribute names. Where HTMLParser and a browser are known to read markup
differently (comment ends, raw-text end tags, self-closing ``<script/>``, ``<svg>`` and
``<noscript>`` content, a stray ``<`` in text) the template is refused outright, so the context the
check sees is the context a mail client sees. Every refusal names its rule and the placeholder;
the check is deliberately stricter than HTML needs: the templates are ours to write plainly.
"""

from __future__ import annotations

import html
import re
import string
from dataclasses import dataclass
from enum import Enum
from html.parser import HTMLParser


class HtmlRule(str, Enum):
    """Why an HTML part is refused; each value is the rule as an author reads it."""

    PLACEHOLDER_SYNTAX = (
        "placeholders are $name or ${name} and every one is escaped: there is no raw or 'safe' form "
        "(write a literal '$' as '$$'; no {{ }} or {% %} syntax)"
    )
    SCRIPT_OR_STYLE = "no placeholder inside <script> or <style>: escaped data still runs as code or CSS there"
    SCRIPT = "no <script> element, with or without a placeholder: an e-mail's HTML part runs no code"
    FORM = (
        "no form or form control (<form>, <input>, <button>, <textarea>, <select>, <keygen>, <isindex>), with or "
        "without a placeholder: an e-mail asks nobody to type into it (a password form is phishing)"
    )
    META_REFRESH = "no <meta http-equiv=\"refresh\">: it sends the reader to another page unasked"
    URL_SCHEME = (
        "a URL's scheme is http, https, mailto, tel, sms or cid, written plainly (no character reference, space "
        "or control character before its ':'): javascript:, data:, vbscript: and the rest run or embed content"
    )
    RAW_TEXT_MARKUP = (
        "the content of <script>, <style>, <title> and <textarea> holds no '<' (parsers disagree on where it ends)"
    )
    DISALLOWED_ELEMENT = (
        "no <svg>, <math>, <noscript>, <template>, <xmp>, <plaintext>, <noembed>, <noframes>, <iframe>, <frame>, "
        "<frameset>, <object>, <embed>, <applet> or <base> (parsers read their content in more than one way, "
        "or they load or redirect what they name)"
    )
    COMMENT = "no placeholder inside a comment (mail clients act on conditional comments)"
    DECLARATION = "no declaration other than <!DOCTYPE ...>, and no CDATA section or processing instruction"
    AMBIGUOUS_MARKUP = (
        "markup parsers read in more than one way: an end tag is '</name>' alone, a comment ends with '-->' "
        "(no '--!>', '-- >', '<!-->' or '<!--->'), a tag closes its quotes, <script/> and the like are "
        "written open and closed"
    )
    TEXT_LT = "a '<' in text is written '&lt;'"
    TAG_NAME = "no placeholder in a tag or attribute name (escaping does not stop a name)"
    UNQUOTED_ATTRIBUTE = "no placeholder in an unquoted attribute value (a space in the data starts a new attribute)"
    EVENT_HANDLER = "no event-handler attribute (on*=), with or without a placeholder: it runs as script"
    STYLE_ATTRIBUTE = "no placeholder in a style attribute: escaped data is still CSS (url(...), expression())"
    URL_START = (
        "a placeholder in a URL attribute (href, src, action, ...) must follow fixed text that decides the "
        "scheme (https://..., mailto:, /path/): escaping does not stop javascript: (srcset and ping take none)"
    )
    URL_HOST = (
        "a placeholder in a URL stands where it cannot move the link elsewhere: after scheme://host and then "
        "'/', '?' or '#' (https://shop.example/${x}; never https://${x}, https://shop.example${x}, before an "
        "'@' or a port, nor //${x}); in mailto:, tel: and sms: right after the scheme or in the query"
    )
    HEAD_ATTRIBUTE = "no placeholder in an attribute of <meta> or <link> (a refresh or preload names a URL of its own)"
    UNPLACED = "a placeholder where no rule places it (in a character reference or an end tag)"


class HtmlPartRefused(ValueError):
    """The HTML part breaks ``rule``; ``where`` names the placeholder or construct, never data."""

    def __init__(self, rule: HtmlRule, where: str) -> None:
        self.rule = rule
        self.where = where
        super().__init__(f"html part: {where}: {rule.value}")


def escape_value(value: str) -> str:
    """How every render value enters the HTML part: as text, never as markup."""
    return html.escape(value, quote=True)


# Elements whose content parsers read in more than one way (foreign content, raw text that depends
# on scripting, the document-ending <plaintext>), or that load, run or redirect what they name.
_DISALLOWED = frozenset(
    {"svg", "math", "noscript", "template", "xmp", "plaintext", "noembed", "noframes", "iframe", "frame",
     "frameset", "object", "embed", "applet", "base"}
)  # fmt: skip
# Form controls: an e-mail that asks for a password or card number is what phishing looks like.
_FORM_ELEMENTS = frozenset({"form", "input", "button", "textarea", "select", "keygen", "isindex"})
# The schemes a link, an image or a background in an e-mail may name (cid: is an image in the message).
SAFE_SCHEMES = frozenset({"http", "https", "mailto", "tel", "sms", "cid"})
# Schemes whose URL names a host (WHATWG's "special" schemes among SAFE_SCHEMES), and those that name an
# address without one.
_HOST_SCHEMES = frozenset({"http", "https"})
_ADDRESS_SCHEMES = frozenset({"mailto", "tel", "sms"})
# Raw text (code, CSS) and escapable raw text (RCDATA: references decoded, tags not read).
_CODE_ELEMENTS = frozenset({"script", "style"})
_RAW_TEXT_ELEMENTS = (*sorted(_CODE_ELEMENTS), "textarea", "title")
# Attributes a browser resolves as one URL (the HTML and SVG attribute indexes), and lists of them.
_URL_ATTRIBUTES = frozenset(
    {"href", "src", "action", "formaction", "background", "cite", "poster", "data", "codebase", "longdesc",
     "usemap", "profile", "classid", "archive", "lowsrc", "dynsrc", "manifest", "icon", "xlink:href"}
)  # fmt: skip
_URL_LIST_ATTRIBUTES = frozenset({"srcset", "imagesrcset", "ping"})
_HEAD_ELEMENTS = frozenset({"meta", "link"})
# HTML's whitespace (the tokenizer's, not Python's \s: a no-break space is part of a name there).
_WS = "\t\n\x0c\r "
# A URL's scheme as the URL parser reads it, and where the text before a scheme's ':' (or a
# relative URL's first segment) ends.
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_SCHEME_STOP = re.compile(r"[/\\?#:]")
# After a host scheme's slashes, the authority (userinfo, host, port) runs to the first of these.
_AUTHORITY_END = re.compile(r"[/\\?#]")
# What may not stand before a URL's first ':', '/', '?' or '#': a reference (decoded into the URL, so
# it could spell a scheme), whitespace or a control character (dropped from it by the URL parser).
_UNPLAIN_HEAD = re.compile(r"[&\x00-\x20\x7f]")
# C0 controls and space: stripped from both ends of a URL by the URL parser.
_C0_AND_SPACE = "".join(map(chr, range(0x21)))
# An end tag as both parsers end it at the same '>': the name (ASCII) and optional whitespace only.
_END_TAG_OPEN = re.compile(r"</")
_PLAIN_END_TAG = re.compile(r"</[A-Za-z][A-Za-z0-9-]*[\t\n\x0c\r ]*>")
# Comment ends HTMLParser and HTML5 place differently ('--!>' ends one for HTML5 only, '-- >' for
# HTMLParser only; '<!-->' and '<!--->' are empty comments to HTML5).
_COMMENT_AMBIGUITY = re.compile(r"--!>|--\s+>|<!--->|<!-->")
_FOREIGN_SYNTAX = re.compile(r"\{\{|\{%")


def check_html_part(text: str) -> None:
    """Refuse (HtmlPartRefused) an HTML part that could emit unescaped or dangerous render data."""
    check_placeholder_syntax(text)
    if _FOREIGN_SYNTAX.search(text):
        raise HtmlPartRefused(HtmlRule.PLACEHOLDER_SYNTAX, "'{{' or '{%'")
    marked, names, marker = _marked(text)
    reader = _ContextReader(marker, names)
    for match in _END_TAG_OPEN.finditer(marked):
        if not _PLAIN_END_TAG.match(marked, match.start()):
            raise HtmlPartRefused(HtmlRule.AMBIGUOUS_MARKUP, f"end tag at {reader.quote(marked, match.start())}")
    if found := _COMMENT_AMBIGUITY.search(marked):
        raise HtmlPartRefused(HtmlRule.AMBIGUOUS_MARKUP, f"comment {found.group()!r}")
    reader.feed(marked)
    if reader.cdata_elem is not None or "<" in reader.rawdata:
        # HTMLParser keeps back what it could not finish: an open <style>, tag, quote or comment.
        raise HtmlPartRefused(HtmlRule.AMBIGUOUS_MARKUP, "unfinished markup at the end of the part")
    reader.close()
    unplaced = sorted(set(range(len(names))) - reader.placed)
    if unplaced:
        raise HtmlPartRefused(HtmlRule.UNPLACED, _describe(names[unplaced[0]]))


def check_placeholder_syntax(text: str) -> None:
    """Every '$' starts a placeholder or is '$$': string.Template would fail at render time otherwise."""
    for match in string.Template.pattern.finditer(text):
        if match.group("invalid") is not None:
            raise HtmlPartRefused(HtmlRule.PLACEHOLDER_SYNTAX, f"'$' at {_quote(text, match.start())}")


def _marked(text: str) -> tuple[str, list[str], re.Pattern[str]]:
    """The text with each placeholder replaced by ``<prefix><n>x`` (lower-case letters and digits, so
    it survives HTMLParser's lower-casing of names), the placeholder names by n, and the markers' pattern."""
    prefix = "heraldslot"
    while prefix in text.lower():
        prefix += "q"
    names: list[str] = []

    def replace(match: re.Match[str]) -> str:
        if match.group("escaped") is not None:
            return "$"
        names.append(match.group("named") or match.group("braced"))
        return f"{prefix}{len(names) - 1}x"

    marked = string.Template.pattern.sub(replace, text)
    return marked, names, re.compile(re.escape(prefix) + r"([0-9]+)x")


def _describe(name: str) -> str:
    return "${" + name + "}"


def _quote(text: str, at: int) -> str:
    """Up to 20 characters of the template from `at`, to point at the construct refused."""
    return repr(text[at : at + 20])


@dataclass(frozen=True)
class _Attribute:
    name: str
    value: str | None  # as written (references not decoded); None: no value
    quoted: bool


def _scan_start_tag(raw: str) -> tuple[str, list[_Attribute]] | None:
    """A start tag read as the HTML5 tokenizer reads it (tag name, before/after attribute name,
    attribute value and self-closing states); None unless it ends at the last character of `raw`."""
    n, i = len(raw), 1
    while i < n and raw[i] not in _WS + "/>":
        i += 1
    tag, attributes = raw[1:i].lower(), []
    while i < n:
        char = raw[i]
        if char in _WS:
            i += 1
        elif char == ">":
            return (tag, attributes) if i == n - 1 else None
        elif char == "/":
            if raw.startswith("/>", i):
                return (tag, attributes) if i == n - 2 else None
            i += 1  # the self-closing state reads anything else as the next attribute
        else:
            start, i = i, i + 1  # a name may begin with '=', '"', "'" or '<'
            while i < n and raw[i] not in _WS + "/>=":
                i += 1
            name = raw[start:i].lower()
            while i < n and raw[i] in _WS:
                i += 1
            if i >= n or raw[i] != "=":
                attributes.append(_Attribute(name, None, False))
                continue
            i += 1
            while i < n and raw[i] in _WS:
                i += 1
            if i < n and raw[i] in "\"'":
                end = raw.find(raw[i], i + 1)
                if end < 0:
                    return None
                attributes.append(_Attribute(name, raw[i + 1 : end], True))
                i = end + 1
            else:
                start = i
                while i < n and raw[i] not in _WS + ">":
                    i += 1
                attributes.append(_Attribute(name, raw[start:i], False))
    return None


def _url_scheme_is_safe(value: str) -> bool:
    """Whether a URL attribute's value (as written, references undecoded) names one of SAFE_SCHEMES or
    none (a relative URL), spelled so that this reading and a browser's cannot differ: nothing before
    its first ':', '/', '?' or '#' is a reference, whitespace or a control character."""
    head = re.match(r"[^:/\\?#]*", value).group()  # type: ignore[union-attr]  # matches any string
    if _UNPLAIN_HEAD.search(head):
        return False
    if not value.startswith(":", len(head)):
        return True  # no scheme: a path, a query or a fragment
    scheme = _SCHEME.fullmatch(head + ":")
    return scheme is not None and scheme.group(1).lower() in SAFE_SCHEMES


def _url_prefix_rule(prefix: str) -> HtmlRule | None:
    """The rule fixed text `prefix` (as written, before the first placeholder) breaks by letting the data
    decide where the URL goes (its scheme, URL_START; its host or address, URL_HOST), or None."""
    prefix = re.sub(r"&[^;]*$", "", prefix)  # a reference the data could complete decides nothing
    # As a URL parser reads it: C0 controls and spaces stripped at the start, tabs and newlines anywhere.
    decoded = re.sub(r"[\t\n\r]", "", html.unescape(prefix)).lstrip(_C0_AND_SPACE)
    if scheme := _SCHEME.match(decoded):
        name, rest = scheme.group(1).lower(), decoded[scheme.end() :]
        if name in _HOST_SCHEMES:
            return None if _host_has_ended(rest) else HtmlRule.URL_HOST
        if name in _ADDRESS_SCHEMES:
            # The whole address is the data's (the author's choice), or the query is; never part of a fixed one.
            return None if rest == "" or "?" in rest else HtmlRule.URL_HOST
        return HtmlRule.URL_START
    if decoded[:1] in ("/", "\\") and (len(decoded) == 1 or decoded[1] in "/\\"):
        # '//host' names a host of its own, and a lone '/' lets the data write the second slash.
        return None if len(decoded) > 1 and _host_has_ended(decoded) else HtmlRule.URL_HOST
    stop = _SCHEME_STOP.search(decoded)
    # ':' first is a scheme of its own; no stop at all leaves the scheme to the data.
    return None if stop is not None and decoded[stop.start()] != ":" else HtmlRule.URL_START


def _host_has_ended(rest: str) -> bool:
    """Whether `rest` (after a host scheme's ':', or a '//' reference) holds a non-empty authority and the
    '/', '\\', '?' or '#' that ends it: the URL parser skips any slashes and backslashes before a host."""
    authority = rest.lstrip("/\\")
    end = _AUTHORITY_END.search(authority)
    return end is not None and end.start() > 0


class _ContextReader(HTMLParser):
    """Reports each placeholder marker's context to the rules; ``placed`` collects the allowed ones."""

    # Read title and textarea as browsers do (escapable raw text), not as markup.
    CDATA_CONTENT_ELEMENTS = _RAW_TEXT_ELEMENTS

    def __init__(self, marker: re.Pattern[str], names: list[str]) -> None:
        super().__init__(convert_charrefs=False)
        self._marker = marker
        self._names = names
        self.placed: set[int] = set()

    def quote(self, text: str, at: int) -> str:
        """Up to 20 characters of the marked template from `at`, its markers shown as placeholders again."""
        shown = self._marker.sub(lambda match: _describe(self._names[int(match.group(1))]), text[at : at + 80])
        return repr(shown[:20])

    def _slots(self, text: str | None) -> list[int]:
        return [int(match.group(1)) for match in self._marker.finditer(text or "")]

    def _refuse(self, rule: HtmlRule, slots: list[int]) -> None:
        raise HtmlPartRefused(rule, _describe(self._names[slots[0]]))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag(tag, attrs)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _RAW_TEXT_ELEMENTS:
            # HTML ignores the '/': <script/> opens a script that HTMLParser would not see.
            raise HtmlPartRefused(HtmlRule.AMBIGUOUS_MARKUP, f"<{tag}/>")
        self._tag(tag, attrs)

    def _tag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        raw = self.get_starttag_text() or ""
        scanned = _scan_start_tag(raw)
        if scanned is None or scanned[0] != tag or [a.name for a in scanned[1]] != [name for name, _ in attrs]:
            raise HtmlPartRefused(HtmlRule.AMBIGUOUS_MARKUP, f"tag {self.quote(raw, 0)}")
        if tag in _DISALLOWED:
            raise HtmlPartRefused(HtmlRule.DISALLOWED_ELEMENT, f"<{tag}>")
        if tag == "script":
            raise HtmlPartRefused(HtmlRule.SCRIPT, self._at(f"<{tag}>"))
        if tag in _FORM_ELEMENTS:
            raise HtmlPartRefused(HtmlRule.FORM, self._at(f"<{tag}>"))
        if slots := self._slots(tag):
            self._refuse(HtmlRule.TAG_NAME, slots)
        for attribute in scanned[1]:
            if slots := self._slots(attribute.name):
                self._refuse(HtmlRule.TAG_NAME, slots)
            if slots := self._slots(attribute.value):
                self._placeholder_in_value(tag, attribute, slots)
            self._fixed_attribute(tag, attribute)
            self.placed.update(slots)

    def _placeholder_in_value(self, tag: str, attribute: _Attribute, slots: list[int]) -> None:
        """The rules a placeholder in an attribute's value breaks, named with the placeholder."""
        name = attribute.name
        if not attribute.quoted:
            self._refuse(HtmlRule.UNQUOTED_ATTRIBUTE, slots)
        if name == "style":
            self._refuse(HtmlRule.STYLE_ATTRIBUTE, slots)
        if tag in _HEAD_ELEMENTS:
            self._refuse(HtmlRule.HEAD_ATTRIBUTE, slots)
        if name in _URL_LIST_ATTRIBUTES:
            self._refuse(HtmlRule.URL_START, slots)
        first = self._marker.search(attribute.value or "")
        if name in _URL_ATTRIBUTES and first and (rule := _url_prefix_rule((attribute.value or "")[: first.start()])):
            self._refuse(rule, slots)

    def _fixed_attribute(self, tag: str, attribute: _Attribute) -> None:
        """The rules an attribute breaks whoever wrote its value: a handler, a refresh, a URL's scheme."""
        name, value = attribute.name, attribute.value
        if name.startswith("on"):
            raise HtmlPartRefused(HtmlRule.EVENT_HANDLER, self._at(f"<{tag} {name}=...>"))
        if value is None:
            return
        if tag == "meta" and name == "http-equiv" and html.unescape(value).strip(_WS).lower() == "refresh":
            raise HtmlPartRefused(HtmlRule.META_REFRESH, self._at(f"<{tag} {name}=...>"))
        if name in _URL_ATTRIBUTES:
            urls = [value]
        elif name in _URL_LIST_ATTRIBUTES:
            # Its URLs are among its tokens between whitespace and commas (srcset's descriptors read as
            # relative URLs, so they pass; a URL holding a comma is read in pieces, each held to the rule).
            urls = re.split(r"[\t\n\x0c\r ,]+", value)
        else:
            return
        if not all(_url_scheme_is_safe(url) for url in urls):
            raise HtmlPartRefused(HtmlRule.URL_SCHEME, self._at(f"<{tag} {name}=...>"))

    def _at(self, construct: str) -> str:
        """A fixed construct and the line of the HTML part it starts on (there is no placeholder to name)."""
        return f"{construct} on line {self.getpos()[0]}"

    def handle_endtag(self, tag: str) -> None:
        if slots := self._slots(tag):
            self._refuse(HtmlRule.TAG_NAME, slots)

    def handle_data(self, data: str) -> None:
        slots = self._slots(data)
        if self.cdata_elem is not None:
            if "<" in data:
                raise HtmlPartRefused(HtmlRule.RAW_TEXT_MARKUP, f"<{self.cdata_elem}>")
            if slots and self.cdata_elem in _CODE_ELEMENTS:
                self._refuse(HtmlRule.SCRIPT_OR_STYLE, slots)
        elif "<" in data:
            raise HtmlPartRefused(HtmlRule.TEXT_LT, f"text {self.quote(data, data.index('<'))}")
        self.placed.update(slots)

    def handle_comment(self, data: str) -> None:
        if slots := self._slots(data):
            self._refuse(HtmlRule.COMMENT, slots)

    def handle_decl(self, decl: str) -> None:
        if not decl.lower().startswith("doctype") or "<" in decl or self._slots(decl):
            raise HtmlPartRefused(HtmlRule.DECLARATION, f"declaration {self.quote('<!' + decl, 0)}")

    def unknown_decl(self, data: str) -> None:
        raise HtmlPartRefused(HtmlRule.DECLARATION, f"section {self.quote('<![' + data, 0)}")

    def handle_pi(self, data: str) -> None:
        raise HtmlPartRefused(HtmlRule.DECLARATION, f"instruction {self.quote('<?' + data, 0)}")
