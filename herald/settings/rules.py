"""The shapes a variable's value may take, each with the sentence that refuses it.

A shape is a pydantic type: ``Annotated[<type>, <constraints or validators>, Rule(<sentence>)]``.
``herald.settings`` declares every variable with one of these (or its own, inline), and reports
any value the shape refuses as ``NAME: <sentence>``, never with pydantic's own message, which
quotes the input. A validator that knows better than the shape's sentence (which key, which line,
"no such file") raises ``refusal(...)`` with its own.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import psycopg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from psycopg.conninfo import conninfo_to_dict
from pydantic import AfterValidator, BeforeValidator, Field, SecretStr
from pydantic_core import PydanticCustomError


@dataclass(frozen=True)
class Rule:
    """What a variable must hold: the sentence an operator reads when its value is refused."""

    text: str


def refusal(rule: str, variable: str | None = None) -> PydanticCustomError:
    """A refusal with its own sentence. `variable` is for model validators, whose errors carry no field."""
    return PydanticCustomError("herald_setting", "{rule}", {"rule": rule, "variable": variable})


# Twilio's SID shapes as its OpenAPI spec declares them (the adapter checks its own Message SIDs).
ACCOUNT_SID_PATTERN = r"^AC[0-9a-fA-F]{32}$"
MESSAGING_SERVICE_SID_PATTERN = r"^MG[0-9a-fA-F]{32}$"


# ---- the sentences ---------------------------------------------------------------------------

PORT = "must be a port number from 1 to 65535"
LISTEN_ADDRESS = "must be host:port with a port from 1 to 65535, e.g. 127.0.0.1:9464"
TEMPORAL_ADDRESS = "must be host:port with a port from 1 to 65535, e.g. 127.0.0.1:7233"
TEMPORAL_NAMESPACE = "must be a namespace name: 1 to 255 letters, digits, '.', '-' or '_'"
HOST = "must be a host name or IP address, without scheme or port, e.g. 127.0.0.1"
TOKEN = "must be one token, without spaces or line breaks"
ONE_LINE = "must be one line"
FILE = "must be the path of a readable file"
PEM = "must be PEM text, beginning with -----BEGIN"
DATABASE_URL = "must be a PostgreSQL connection string, e.g. postgresql://user:password@host:5432/dbname"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
FLAG = "must be one of " + ", ".join(_TRUE + _FALSE)
# Temporal's loader (temporalio.envconfig) knows only these, in any case; any other TEMPORAL_TLS,
# "no" and "off" included, turns TLS *on* there. Refused, so a value never means one thing to
# Herald and the opposite to Temporal's SDK.
_TEMPORAL_TRUE, _TEMPORAL_FALSE = ("true", "1"), ("false", "0")
TEMPORAL_FLAG = "must be one of true, 1, false, 0 (the spellings Temporal's loader reads)"


# ---- the checks ------------------------------------------------------------------------------


def _url_rule(example: str) -> str:
    return f"must be an http:// or https:// URL with a host, e.g. {example}"


def _seconds_rule(maximum: float) -> str:
    return f"must be a number of seconds from 0 to {maximum:g}"


def _whole_number(value: Any) -> Any:
    """Digits only: int() would also take "+8", " 8", "8_0" and "٨" (an Arabic-Indic eight)."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("not a whole number")
    return value


def _flag(true: tuple[str, ...], false: tuple[str, ...]) -> Callable[[Any], Any]:
    """A yes/no setting read in these spellings; any other is refused (a typo must not mean "off")."""

    def read(value: Any) -> Any:
        if isinstance(value, str):
            if value.lower() not in true + false:
                raise ValueError("not a flag")
            return value.lower() in true
        return value

    return read


def _lowercase(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _host_port(value: str) -> str:
    """host:port ([::1]:9464 for IPv6). The port is checked; the host only for blanks, since names,
    IPv4 and bracketed IPv6 all appear here and the resolver is the judge of a name."""
    host, _, port = value.rpartition(":")
    if not (host and port.isascii() and port.isdigit() and 1 <= int(port) <= 65_535) or " " in host:
        raise ValueError("not host:port")
    return value


_HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?")


def _host(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if not (len(value) <= 253 and _HOST_NAME.fullmatch(value)):
            raise ValueError("not a host") from None
    return value


def _http_url(value: str) -> str:
    scheme, _, rest = value.partition("://")
    if scheme.lower() not in ("http", "https") or not rest.split("/")[0]:
        raise ValueError("not an http(s) URL")
    return value


def _token(value: Any) -> Any:
    """Keys and tokens travel in headers: whitespace inside is a paste accident, a line break a second header."""
    if isinstance(value, str) and any(character.isspace() for character in value):
        raise ValueError("not one token")
    return value


def _one_line(value: Any) -> Any:
    """A line break in a protocol credential (SMTP AUTH, a gRPC header) would be a second command."""
    if isinstance(value, str) and any(character in value for character in "\r\n\0"):
        raise ValueError("not one line")
    return value


def _pem(value: Any) -> Any:
    """The certificate itself: a path given to a *_DATA variable must not reach the TLS handshake as one."""
    if isinstance(value, str) and not value.startswith("-----BEGIN"):
        raise ValueError("not PEM")
    return value


def _readable_file(path: Path) -> Path:
    """A file that opens: refused at start, in one line, not at connect time, where a missing
    certificate would look like a network failure. The sentences are the command line's
    (herald/cli/input.py), so `starter.py` and the services say the same thing."""
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except FileNotFoundError:
        raise refusal("no such file") from None
    except IsADirectoryError:
        raise refusal("is a directory, not a file") from None
    except OSError as error:  # permission denied and the like; strerror never includes the path
        raise refusal(f"cannot be read ({error.strerror or type(error).__name__})") from None
    except ValueError:  # a NUL byte in the path
        raise refusal("is not a usable file path") from None
    return path


def _directory_or_absent(path: Path) -> Path:
    """Herald creates a missing state directory; an existing file in its place it cannot use."""
    if path.exists() and not path.is_dir():
        raise ValueError("not a directory")
    return path


def _not_a_directory(path: Path) -> Path:
    if path.is_dir():
        raise ValueError("a directory")
    return path


def _database_url(value: Any) -> Any:
    """What libpq can parse; the refusal never repeats it (it may carry a password)."""
    if isinstance(value, str):
        try:
            conninfo_to_dict(value)
        except psycopg.ProgrammingError:
            raise ValueError("not a connection string") from None
    return value


def _positive(maximum: float) -> Any:
    def above_zero(value: float) -> float:
        if value == 0:
            raise refusal(f"must be a number of seconds above 0, at most {maximum:g}")
        return value

    return AfterValidator(above_zero)


# ---- the shapes ------------------------------------------------------------------------------

Port = Annotated[int, BeforeValidator(_whole_number), Field(ge=1, le=65_535), Rule(PORT)]
Host = Annotated[str, AfterValidator(_host), Rule(HOST)]
Token = Annotated[SecretStr, BeforeValidator(_token), Rule(TOKEN)]
ReadableFile = Annotated[Path, AfterValidator(_readable_file), Rule(FILE)]
DatabaseUrl = Annotated[SecretStr, BeforeValidator(_database_url), Rule(DATABASE_URL)]
Flag = Annotated[bool, BeforeValidator(_flag(_TRUE, _FALSE)), Rule(FLAG)]
TemporalAddress = Annotated[str, AfterValidator(_host_port), Rule(TEMPORAL_ADDRESS)]
TemporalNamespace = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,255}$"), Rule(TEMPORAL_NAMESPACE)]
TemporalFlag = Annotated[bool, BeforeValidator(_flag(_TEMPORAL_TRUE, _TEMPORAL_FALSE)), Rule(TEMPORAL_FLAG)]
ListenAddress = Annotated[str, AfterValidator(_host_port), Rule(LISTEN_ADDRESS)]
OneLine = Annotated[str, BeforeValidator(_one_line), Rule(ONE_LINE)]
SecretOneLine = Annotated[SecretStr, BeforeValidator(_one_line), Rule(ONE_LINE)]
Pem = Annotated[str, BeforeValidator(_pem), Rule(PEM)]
SecretPem = Annotated[SecretStr, BeforeValidator(_pem), Rule(PEM)]
Lowercase = BeforeValidator(_lowercase)
DirectoryPath = Annotated[
    Path, AfterValidator(_directory_or_absent), Rule("must be a directory, or a path where one can be created")
]
FilePath = Annotated[Path, AfterValidator(_not_a_directory), Rule("must be a file path, not a directory")]


def Seconds(maximum: float) -> Any:  # noqa: N802 - a type, spelled like one
    return Annotated[float, Field(ge=0, le=maximum, allow_inf_nan=False), Rule(_seconds_rule(maximum))]


def PositiveSeconds(maximum: float) -> Any:  # noqa: N802
    """Above 0; zero has its own sentence, anything else outside 0 to `maximum` the range's."""
    return Annotated[Seconds(maximum), _positive(maximum)]


def Timeout(maximum: float) -> Any:  # noqa: N802
    """Above 0 and at most `maximum`, with the range's sentence for zero too (no timeout is not an option)."""
    return Annotated[float, Field(gt=0, le=maximum, allow_inf_nan=False), Rule(_seconds_rule(maximum))]


def Count(maximum: int) -> Any:  # noqa: N802
    rule = Rule(f"must be a whole number from 1 to {maximum}")
    return Annotated[int, BeforeValidator(_whole_number), Field(ge=1, le=maximum), rule]


def Url(example: str) -> Any:  # noqa: N802
    return Annotated[str, AfterValidator(_http_url), Rule(_url_rule(example))]


def load_public_key(value: str) -> ec.EllipticCurvePublicKey:
    """The verification key from SendGrid's console: base64 DER SubjectPublicKeyInfo, or PEM.

    Raises:
        ValueError: the value is not a P-256 public key.
    """
    value = value.strip()
    try:
        if value.startswith("-----BEGIN"):
            key = serialization.load_pem_public_key(value.encode("ascii"))
        else:
            key = serialization.load_der_public_key(base64.b64decode(value, validate=True))
    except (ValueError, TypeError, binascii.Error, UnicodeEncodeError) as error:
        raise ValueError("not a base64 DER or PEM public key") from error
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("not an ECDSA P-256 public key")
    return key
