"""The query language of SendGrid's Email Activity API (``GET /v3/messages?query=...``): a tokenizer,
a recursive-descent parser, and the conditions it builds, each able to judge one feed message.

SendGrid documents the basic form as ``{query_type}="{query_content}"`` (URL-encoded), clauses joined
with ``AND`` (and ``OR``), in a SQL-like syntax. The subset this emulator understands::

    query      := either EOF
    either     := both ( OR both )*
    both       := term ( AND term )*
    term       := "(" either ")" | condition
    condition  := TEXT_FIELD "=" STRING                       msg_id, from_email, subject, to_email, status
                | unique_args "[" 'NAME' "]" "=" STRING       the key in single quotes, the value in double
                | last_event_time BETWEEN TIMESTAMP STRING AND TIMESTAMP STRING
                | last_event_time ( ">" | ">=" | "<" | "<=" ) TIMESTAMP STRING

``AND`` binds tighter than ``OR``; keywords are case-insensitive, as in SQL; strings are in double quotes
with ``\\"`` and ``\\\\`` as escapes; timestamps are ISO 8601 (a time without a zone is UTC).

Anything else raises ``QuerySyntaxError`` and the API answers 400 ``invalid syntax: ...``. Two refusals
copy SendGrid on purpose, so a client that gets them wrong fails here as it would there: a bare
``unique_args="x"`` (unique_args is a map, so SendGrid answers ``operator = is incompatible with
MAP<STRING,STRING>, STRING``) and an unknown field (``'bad_field' is not a known field``, the example in
SendGrid's OpenAPI description). Fields SendGrid knows but this emulator keeps no data for
(``template_id``, ``categories``, ...) are refused with a message saying so, rather than silently
matching nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Protocol

# A query is one URL parameter; this bounds the parser's work on hostile input, as does the nesting bound
# (each level of parentheses is one level of recursion).
MAX_QUERY_CHARS = 10_000
_MAX_NESTING = 32

# Fields SendGrid's query reference lists that this emulator cannot filter on: it keeps no such data.
_UNSUPPORTED_FIELDS = frozenset(
    {
        "template_id", "asm_group_id", "api_key_id", "events", "originating_ip", "categories",
        "outbound_ip", "outbound_ip_type", "teammate", "opens_count", "clicks_count", "marketing_campaign_id",
        "marketing_campaign_name", "marketing_campaign_split_id", "marketing_campaign_version",
        "ip_pool", "clicks", "opens", "unique_opens", "unique_clicks",
    }
)  # fmt: skip
_TEXT_FIELDS = ("msg_id", "from_email", "subject", "to_email", "status")
# E-mail addresses are matched without regard to case, as mail is delivered (and as the fault registry does).
_CASELESS_FIELDS = frozenset({"from_email", "to_email"})
_TIME_OPERATORS = (">", ">=", "<", "<=")


class QuerySyntaxError(ValueError):
    """A query this emulator refuses; the text is what follows ``invalid syntax: `` in the 400 answer."""


class Searchable(Protocol):
    """What a condition reads of one feed message (one recipient of one accepted message)."""

    @property
    def msg_id(self) -> str: ...
    @property
    def from_email(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def to_email(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def unique_args(self) -> Mapping[str, str]: ...
    @property
    def last_event_time(self) -> datetime: ...


# --- the conditions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextEquals:
    field: str
    value: str

    def matches(self, message: Searchable) -> bool:
        actual: str = getattr(message, self.field)
        if self.field in _CASELESS_FIELDS:
            return actual.lower() == self.value.lower()
        return actual == self.value


@dataclass(frozen=True)
class UniqueArgEquals:
    name: str
    value: str

    def matches(self, message: Searchable) -> bool:
        return message.unique_args.get(self.name) == self.value


@dataclass(frozen=True)
class LastEventBetween:
    """Inclusive at both ends, as SQL's BETWEEN."""

    start: datetime
    end: datetime

    def matches(self, message: Searchable) -> bool:
        return self.start <= message.last_event_time <= self.end


@dataclass(frozen=True)
class LastEventCompared:
    operator: str
    moment: datetime

    def matches(self, message: Searchable) -> bool:
        actual = message.last_event_time
        if self.operator == ">":
            return actual > self.moment
        if self.operator == ">=":
            return actual >= self.moment
        if self.operator == "<":
            return actual < self.moment
        return actual <= self.moment


@dataclass(frozen=True)
class AllOf:
    parts: tuple[Condition, ...]

    def matches(self, message: Searchable) -> bool:
        return all(part.matches(message) for part in self.parts)


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Condition, ...]

    def matches(self, message: Searchable) -> bool:
        return any(part.matches(message) for part in self.parts)


Condition = TextEquals | UniqueArgEquals | LastEventBetween | LastEventCompared | AllOf | AnyOf


# --- the tokenizer ----------------------------------------------------------------------------------


class TokenKind(Enum):
    WORD = "word"  # a field name or a keyword
    STRING = "string"  # "double quoted"
    NAME = "name"  # 'single quoted': a unique_args key
    SYMBOL = "symbol"  # ( ) [ ] = > >= < <= !=
    END = "end"


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str
    position: int  # 0-based offset in the query, for error messages

    def describe(self) -> str:
        if self.kind is TokenKind.END:
            return "end of query"
        if self.kind is TokenKind.STRING:
            return f'"{self.text}" at position {self.position}'
        return f"'{self.text}' at position {self.position}"

    def is_keyword(self, keyword: str) -> bool:
        return self.kind is TokenKind.WORD and self.text.upper() == keyword


_TWO_CHAR_SYMBOLS = (">=", "<=", "!=")
_ONE_CHAR_SYMBOLS = "()[]=<>"


def tokenize(query: str) -> list[Token]:
    """The tokens of ``query``, ending with an END token.

    Raises:
        QuerySyntaxError: an unterminated string or a character the language has no use for.
    """
    tokens: list[Token] = []
    index = 0
    while index < len(query):
        char = query[index]
        if char.isspace():
            index += 1
        elif char.isalpha() or char == "_":
            end = index
            while end < len(query) and (query[end].isalnum() or query[end] == "_"):
                end += 1
            tokens.append(Token(TokenKind.WORD, query[index:end], index))
            index = end
        elif char in "\"'":
            text, index_after = _quoted(query, index)
            tokens.append(Token(TokenKind.STRING if char == '"' else TokenKind.NAME, text, index))
            index = index_after
        elif query[index : index + 2] in _TWO_CHAR_SYMBOLS:
            tokens.append(Token(TokenKind.SYMBOL, query[index : index + 2], index))
            index += 2
        elif char in _ONE_CHAR_SYMBOLS:
            tokens.append(Token(TokenKind.SYMBOL, char, index))
            index += 1
        else:
            # Curly quotes land here too: they are what a copy from a rendered web page brings.
            raise QuerySyntaxError(f"unexpected character {char!r} at position {index}")
    tokens.append(Token(TokenKind.END, "", len(query)))
    return tokens


def _quoted(query: str, start: int) -> tuple[str, int]:
    """The text of the string opening at ``start`` (its escapes resolved) and the index after it."""
    quote = query[start]
    chars: list[str] = []
    index = start + 1
    while index < len(query):
        char = query[index]
        if char == "\\" and index + 1 < len(query) and query[index + 1] in (quote, "\\"):
            chars.append(query[index + 1])
            index += 2
        elif char == quote:
            return "".join(chars), index + 1
        else:
            chars.append(char)
            index += 1
    raise QuerySyntaxError(f"unterminated string starting at position {start}")


# --- the parser -------------------------------------------------------------------------------------


def parse_query(query: str) -> Condition:
    """The condition ``query`` states.

    Raises:
        QuerySyntaxError: the query is empty, too long, or not in the language above.
    """
    if len(query) > MAX_QUERY_CHARS:
        raise QuerySyntaxError(f"query must be at most {MAX_QUERY_CHARS} characters")
    if not query.strip():
        raise QuerySyntaxError("the query is empty")
    return _Parser(tokenize(query)).parse()


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self._tokens = tokens
        self._index = 0
        self._depth = 0

    def parse(self) -> Condition:
        condition = self._either()
        if self._peek().kind is not TokenKind.END:
            raise QuerySyntaxError(f"expected AND, OR or the end of the query, found {self._peek().describe()}")
        return condition

    def _peek(self) -> Token:
        return self._tokens[self._index]

    def _next(self) -> Token:
        token = self._tokens[self._index]
        if token.kind is not TokenKind.END:
            self._index += 1
        return token

    def _expect_symbol(self, symbol: str, context: str) -> None:
        token = self._next()
        if token.kind is not TokenKind.SYMBOL or token.text != symbol:
            raise QuerySyntaxError(f"expected '{symbol}' {context}, found {token.describe()}")

    def _expect_keyword(self, keyword: str, context: str) -> None:
        token = self._next()
        if not token.is_keyword(keyword):
            raise QuerySyntaxError(f"expected {keyword} {context}, found {token.describe()}")

    def _expect_string(self, context: str) -> str:
        token = self._next()
        if token.kind is not TokenKind.STRING:
            raise QuerySyntaxError(f'expected a "double-quoted" value {context}, found {token.describe()}')
        return token.text

    def _either(self) -> Condition:
        parts = [self._both()]
        while self._peek().is_keyword("OR"):
            self._next()
            parts.append(self._both())
        return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))

    def _both(self) -> Condition:
        parts = [self._term()]
        while self._peek().is_keyword("AND"):
            self._next()
            parts.append(self._term())
        return parts[0] if len(parts) == 1 else AllOf(tuple(parts))

    def _term(self) -> Condition:
        token = self._peek()
        if token.kind is TokenKind.SYMBOL and token.text == "(":
            self._next()
            self._depth += 1
            if self._depth > _MAX_NESTING:
                raise QuerySyntaxError(f"parentheses nest deeper than {_MAX_NESTING} levels")
            condition = self._either()
            self._expect_symbol(")", f"to close the '(' at position {token.position}")
            self._depth -= 1
            return condition
        return self._condition()

    def _condition(self) -> Condition:
        token = self._next()
        if token.kind is not TokenKind.WORD or token.is_keyword("AND") or token.is_keyword("OR"):
            raise QuerySyntaxError(f"expected a field name, found {token.describe()}")
        field = token.text
        if field == "unique_args":
            return self._unique_arg()
        if field == "last_event_time":
            return self._last_event_time()
        if field in _TEXT_FIELDS:
            self._expect_symbol("=", f"after {field} (this emulator compares {field} with = only)")
            return TextEquals(field, self._expect_string(f"after {field}="))
        if field in _UNSUPPORTED_FIELDS:
            raise QuerySyntaxError(f"'{field}' is a SendGrid field this emulator keeps no data for")
        raise QuerySyntaxError(f"'{field}' is not a known field")

    def _unique_arg(self) -> Condition:
        token = self._next()
        if token.kind is TokenKind.SYMBOL and token.text == "=":
            # SendGrid's own answer: unique_args is a map and must be indexed by one key.
            raise QuerySyntaxError("operator = is incompatible with MAP<STRING,STRING>, STRING")
        if token.kind is not TokenKind.SYMBOL or token.text != "[":
            raise QuerySyntaxError(f"expected '[' after unique_args, found {token.describe()}")
        name = self._next()
        if name.kind is not TokenKind.NAME:
            raise QuerySyntaxError(
                f"expected a unique argument name in single quotes (unique_args['name']), found {name.describe()}"
            )
        self._expect_symbol("]", f"after unique_args['{name.text}'")
        self._expect_symbol("=", f"after unique_args['{name.text}']")
        return UniqueArgEquals(name.text, self._expect_string(f"after unique_args['{name.text}']="))

    def _last_event_time(self) -> Condition:
        token = self._next()
        if token.is_keyword("BETWEEN"):
            start = self._timestamp("after BETWEEN")
            self._expect_keyword("AND", "between the two timestamps of BETWEEN")
            end = self._timestamp("after BETWEEN ... AND")
            return LastEventBetween(start, end)
        if token.kind is TokenKind.SYMBOL and token.text in _TIME_OPERATORS:
            return LastEventCompared(token.text, self._timestamp(f"after last_event_time{token.text}"))
        raise QuerySyntaxError(f"expected BETWEEN, >, >=, < or <= after last_event_time, found {token.describe()}")

    def _timestamp(self, context: str) -> datetime:
        self._expect_keyword("TIMESTAMP", f'{context} (last_event_time compares with TIMESTAMP "...")')
        text = self._expect_string(f"after TIMESTAMP {context}")
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise QuerySyntaxError(f'TIMESTAMP "{text}" is not an ISO 8601 time') from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.astimezone(timezone.utc)
