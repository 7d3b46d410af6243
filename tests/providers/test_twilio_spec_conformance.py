"""The Twilio adapter against Twilio's own OpenAPI description of API 2010-04-01.

Every request the adapter really makes (captured through httpx.MockTransport)
must be an operation the spec declares, with only declared parameters, every
required one present, and enum values the spec allows; and the adapter must
read the spec's Message resource, every property of it, without trouble.

The repo carries the Messages part of the spec (``data/twilio_api_v2010_messages.json``,
the two Messages paths and every schema they reference, verbatim, under the MIT
licence beside it), so the check runs from any clone. Where the full document is
beside the repo (``../shared/reference/twilio_api_v2010.json``), it is used instead
and the carried extract is checked against it, so the extract cannot drift.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest

from herald.core.message import Channel, Message, MessageReference
from herald.core.outcomes import Accepted, Candidates, Found, ProviderStatus, Unavailable
from herald.providers.port import OutboundMessage
from herald.providers.twilio import TwilioAdapter
from herald.providers.twilio_codes import STATUS_LABELS
from herald.settings import TwilioSettings

REPO_ROOT = Path(__file__).parents[2]
FULL_SPEC_PATH = REPO_ROOT.parent / "shared" / "reference" / "twilio_api_v2010.json"
EXTRACT_PATH = Path(__file__).parent / "data" / "twilio_api_v2010_messages.json"
SPEC_PATH = FULL_SPEC_PATH if FULL_SPEC_PATH.is_file() else EXTRACT_PATH

# The spec's examples use this account SID in their URIs; using it lets us replay them verbatim.
ACCOUNT_SID = "AC" + "a" * 32
SERVICE_SID = "MG" + "a" * 32
RECIPIENT = "+14155552345"
SENDER = "+14155550000"
BODY = "Hello! \U0001f44d"  # the body the spec's examples carry
SINCE = datetime(2008, 1, 3, tzinfo=UTC)


def reference(content_sha256: str) -> MessageReference:
    """An attempt's reference as a lookup names it, with a bound no message of the spec's examples reaches."""
    return MessageReference(
        recipient=RECIPIENT, content_sha256=content_sha256, attempt_ref="att_1", since=SINCE,
        created_by=SINCE + timedelta(days=365 * 30),
    )  # fmt: skip
FORM = "application/x-www-form-urlencoded"
MESSAGE_SCHEMA = "api.v2010.account.message"
# Every field of a Message the adapter reads; each must exist in the spec's schema.
FIELDS_READ = {
    "sid", "status", "error_code", "date_updated", "date_created", "date_sent", "body", "to", "from", "direction",
    "messaging_service_sid",
}  # fmt: skip
LIST_FIELDS_READ = {"messages", "next_page_uri"}


@functools.cache
def _read_spec() -> dict[str, Any] | None:
    return json.loads(SPEC_PATH.read_text(encoding="utf-8")) if SPEC_PATH.is_file() else None


def load_spec() -> dict[str, Any]:
    """The parsed spec; called inside each test so a missing file is a test failure, not a setup error."""
    spec = _read_spec()
    if spec is None:
        pytest.fail(
            f"Twilio OpenAPI spec not found at {SPEC_PATH}; the conformance tests cannot run without it, "
            "so they fail rather than skip."
        )
    return spec


def resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        prefix = "#/components/schemas/"
        assert schema["$ref"].startswith(prefix), schema["$ref"]
        schema = spec["components"]["schemas"][schema["$ref"][len(prefix) :]]
    return schema


def find_operation(spec: dict[str, Any], method: str, path: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    """The (path template, operation, path parameter values) a concrete method and path match."""
    for template, item in spec["paths"].items():
        pattern = "^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template)) + "$"
        matched = re.match(pattern, path)
        if matched and method.lower() in item:
            return template, item[method.lower()], matched.groupdict()
    pytest.fail(f"{method} {path} matches no operation in the spec")


def check_value(spec: dict[str, Any], where: str, name: str, value: str, schema: dict[str, Any]) -> None:
    schema = resolve(spec, schema)
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {name}={value!r} is not one of {schema['enum']}"
    if "pattern" in schema:
        assert re.search(schema["pattern"], value), f"{where}: {name} does not match {schema['pattern']}"
    if schema.get("type") == "integer":
        assert re.fullmatch(r"-?\d+", value), f"{where}: {name} must be an integer"
        if "minimum" in schema:
            assert int(value) >= schema["minimum"], f"{where}: {name} below minimum"
        if "maximum" in schema:
            assert int(value) <= schema["maximum"], f"{where}: {name} above maximum"
    if schema.get("type") == "boolean":
        assert value in ("true", "false"), f"{where}: {name} must be a boolean"


def check_request(spec: dict[str, Any], request: httpx.Request) -> str:
    """Assert one captured request conforms to the spec; return its operationId."""
    template, operation, path_values = find_operation(spec, request.method, request.url.path)
    where = f"{request.method} {template} ({operation['operationId']})"
    servers = [server["url"] for server in spec["paths"][template].get("servers", spec.get("servers", []))]
    assert f"{request.url.scheme}://{request.url.host}" in servers, f"{where}: host not among {servers}"

    declared = operation.get("parameters", [])
    path_params = {p["name"]: p for p in declared if p["in"] == "path"}
    assert set(path_values) == set(path_params), f"{where}: path parameters differ from the spec"
    for name, value in path_values.items():
        check_value(spec, where, name, value, path_params[name]["schema"])

    query_params = {p["name"]: p for p in declared if p["in"] == "query"}
    sent_query = request.url.params.multi_items()
    for name, value in sent_query:
        assert name in query_params, f"{where}: query parameter {name!r} is not declared"
        check_value(spec, where, name, value, query_params[name]["schema"])
    for name, parameter in query_params.items():
        if parameter.get("required"):
            assert name in dict(sent_query), f"{where}: required query parameter {name!r} missing"

    body = operation.get("requestBody")
    if body is None:
        assert request.content == b"", f"{where}: the operation takes no body"
    else:
        assert request.headers.get("Content-Type") == FORM, f"{where}: body must be {FORM}"
        schema = resolve(spec, body["content"][FORM]["schema"])
        properties = schema["properties"]
        sent_form = parse_qsl(request.content.decode("utf-8"), keep_blank_values=True)
        for name, value in sent_form:
            assert name in properties, f"{where}: form parameter {name!r} is not declared"
            check_value(spec, where, name, value, properties[name])
        for name in schema.get("required", []):
            assert name in dict(sent_form), f"{where}: required form parameter {name!r} missing"

    scheme = spec["components"]["securitySchemes"]
    assert all(scheme[name]["scheme"] == "basic" for requirement in operation["security"] for name in requirement)
    assert request.headers["Authorization"].startswith("Basic "), f"{where}: Basic auth missing"
    return operation["operationId"]


def example(spec: dict[str, Any], path: str, method: str, status: str, name: str) -> dict[str, Any]:
    return spec["paths"][path][method]["responses"][status]["content"]["application/json"]["examples"][name]["value"]


def spec_replaying_transport(spec: dict[str, Any], seen: list[httpx.Request]) -> httpx.MockTransport:
    """Answer each operation with the spec's own example response, recording every request."""
    collection = "/2010-04-01/Accounts/{AccountSid}/Messages.json"
    instance = "/2010-04-01/Accounts/{AccountSid}/Messages/{Sid}.json"

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        template, operation, _ = find_operation(spec, request.method, request.url.path)
        operation_id = operation["operationId"]
        if operation_id == "CreateMessage":
            return httpx.Response(201, json=example(spec, collection, "post", "201", "create"))
        if operation_id == "FetchMessage":
            return httpx.Response(200, json=example(spec, instance, "get", "200", "fetch"))
        if operation_id == "UpdateMessage":
            return httpx.Response(200, json=example(spec, instance, "post", "200", "cancelMessage"))
        if operation_id == "ListMessage":
            first = example(spec, collection, "get", "200", "readFullPage1")
            if "PageToken" not in request.url.params:
                return httpx.Response(200, json=first)
            return httpx.Response(200, json={**first, "messages": [], "next_page_uri": None, "page": 1})
        pytest.fail(f"the adapter called {operation_id}, which it has no business calling")

    return handler


def make_adapter(transport: httpx.AsyncBaseTransport, **sender: str | None) -> TwilioAdapter:
    config = TwilioSettings(
        account_sid=ACCOUNT_SID, auth_token="spec-test-token", **(sender or {"from_number": SENDER})
    )
    return TwilioAdapter(config, transport=transport)


async def test_every_request_conforms_to_the_spec() -> None:
    """Every request the adapter makes is a spec operation with declared, required and enum-valid parameters only."""
    spec = load_spec()
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(spec_replaying_transport(spec, seen))
    async with make_adapter(transport) as adapter:
        # Through the provider port, as the submit activity calls it.
        submitted = await adapter.submit(
            OutboundMessage(
                message=Message(channel=Channel.SMS, recipient=RECIPIENT, body=BODY),
                attempt_ref="att_1",
                receipts_url="https://herald.example",
                validity_seconds=600,
            )
        )
        fetched = await adapter.fetch("SMb7c0a2ce80504485a6f653a7110836f5")
        searched = await adapter.find_by_reference(reference(hashlib.sha256(b"no such body").hexdigest()))
        canceled = await adapter.cancel("SMb7c0a2ce80504485a6f653a7110836f5")
    async with make_adapter(transport, messaging_service_sid=SERVICE_SID) as adapter:
        via_service = await adapter.send_sms(to=RECIPIENT, body=BODY, status_callback=None)

    assert isinstance(submitted.result, Accepted) and isinstance(via_service.result, Accepted)
    assert isinstance(fetched.result, Found)
    assert searched.result.kind == "not_found"
    assert canceled.canceled is True
    operations = [check_request(spec, request) for request in seen]
    assert sorted(set(operations)) == ["CreateMessage", "FetchMessage", "ListMessage", "UpdateMessage"]
    # The list was read to its end: the second page came from the spec example's next_page_uri.
    assert operations.count("ListMessage") == 2


async def test_search_filters_by_the_spec_parameters_and_never_by_date_sent() -> None:
    """The search lists by the spec's `To` and `From` query parameters and sends no `DateSent` filter, which would hide unsent messages."""
    spec = load_spec()
    seen: list[httpx.Request] = []
    async with make_adapter(httpx.MockTransport(spec_replaying_transport(spec, seen))) as adapter:
        await adapter.find_by_reference(reference("0" * 64))
    _, operation, _ = find_operation(spec, "GET", seen[0].url.path)
    declared = {p["name"] for p in operation["parameters"] if p["in"] == "query"}
    assert {"To", "From"} <= declared
    assert seen[0].url.params["To"] == RECIPIENT and seen[0].url.params["From"] == SENDER
    assert not any(name.startswith("DateSent") for name in seen[0].url.params)


async def test_validity_period_is_the_spec_parameter() -> None:
    """The queue bound goes out as the spec's integer `ValidityPeriod` form parameter, within its documented range."""
    spec = load_spec()
    seen: list[httpx.Request] = []
    async with make_adapter(httpx.MockTransport(spec_replaying_transport(spec, seen))) as adapter:
        await adapter.send_sms(to=RECIPIENT, body=BODY, status_callback=None, validity_seconds=36_000)
    properties = resolve(spec, find_operation(spec, "POST", seen[0].url.path)[1]["requestBody"]["content"][FORM]["schema"])
    assert properties["properties"]["ValidityPeriod"]["type"] == "integer"
    assert "36000" in properties["properties"]["ValidityPeriod"]["description"].replace(",", "")
    assert dict(parse_qsl(seen[0].content.decode()))["ValidityPeriod"] == "36000"
    check_request(spec, seen[0])


def sample_value(spec: dict[str, Any], name: str, schema: dict[str, Any]) -> Any:
    """A value for one Message property, derived from its schema."""
    schema = resolve(spec, schema)
    if "enum" in schema:
        return {"status": "delivered", "direction": "outbound-api"}.get(name, schema["enum"][0])
    if "pattern" in schema:
        shape = re.fullmatch(r"\^\(?([A-Z]{2})(?:\|[A-Z]{2})*\)?\[0-9a-fA-F\]\{(\d+)\}\$", schema["pattern"])
        assert shape, f"no sample generator for pattern {schema['pattern']} of {name}"
        return shape.group(1) + "0" * int(shape.group(2))
    if schema.get("format") == "date-time-rfc-2822":
        return format_datetime(datetime(2008, 1, 3, 12, 0, tzinfo=UTC))
    if schema.get("type") == "integer":
        return 30007
    if schema.get("type") == "object":
        return {"media": "/2010-04-01/Accounts/AC/Messages/SM/Media.json"}
    return {"body": BODY, "to": RECIPIENT, "from": SENDER}.get(name, "1")


def full_message(spec: dict[str, Any]) -> dict[str, Any]:
    properties = spec["components"]["schemas"][MESSAGE_SCHEMA]["properties"]
    return {name: sample_value(spec, name, schema) for name, schema in properties.items()}


async def serve(message: dict[str, Any]) -> tuple[Any, Any, Any]:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.endswith("/Messages.json"):
            return httpx.Response(200, json={"messages": [message], "next_page_uri": None})
        return httpx.Response(201 if request.method == "POST" else 200, json=message)

    async with make_adapter(httpx.MockTransport(handler)) as adapter:
        submitted = await adapter.send_sms(to=RECIPIENT, body=BODY, status_callback=None)
        fetched = await adapter.fetch("SM" + "0" * 32)
        found = await adapter.find_by_reference(reference(hashlib.sha256(BODY.encode("utf-8")).hexdigest()))
    return submitted.result, fetched.result, _the_one_candidate(found.result)


def _the_one_candidate(result: Any) -> Any:
    """A search's one fitting message, as the ledger's claim rule would be handed it (else the result)."""
    if isinstance(result, Candidates):
        (candidate,) = result.messages
        return candidate.found
    return result


async def test_adapter_reads_every_message_property() -> None:
    """A Message carrying every property of the spec's schema is parsed by submit, fetch and find_by_reference."""
    spec = load_spec()
    schema = spec["components"]["schemas"][MESSAGE_SCHEMA]
    assert FIELDS_READ <= set(schema["properties"]), "the adapter reads a field the spec does not declare"
    list_schema = spec["paths"]["/2010-04-01/Accounts/{AccountSid}/Messages.json"]["get"]["responses"]["200"]
    assert LIST_FIELDS_READ <= set(list_schema["content"]["application/json"]["schema"]["properties"])

    message = full_message(spec)
    assert set(message) == set(schema["properties"])
    submitted, fetched, found = await serve(message)
    sid = "SM" + "0" * 32
    # 30007 (carrier filtering) is permanent in Twilio's table: the adapter says so at the edge.
    assert submitted == Accepted(provider_id=sid, status=ProviderStatus.DELIVERED, error_code=30007, failure_retryable=False)
    expected = Found(
        provider_id=sid,
        status=ProviderStatus.DELIVERED,
        error_code=30007,
        failure_retryable=False,
        provider_updated_at=datetime(2008, 1, 3, 12, 0, tzinfo=UTC),
    )
    assert fetched == expected
    assert found == expected


async def test_adapter_survives_nullable_properties() -> None:
    """With every nullable property null except sid and the match keys, parsing still succeeds."""
    spec = load_spec()
    schema = spec["components"]["schemas"][MESSAGE_SCHEMA]
    message = full_message(spec)
    for name, property_schema in schema["properties"].items():
        if property_schema.get("nullable") and name not in {"sid", "body", "to", "date_created"}:
            message[name] = None
    _, fetched, found = await serve(message)
    assert isinstance(fetched, Found) and fetched.provider_updated_at is None and fetched.error_code is None
    assert isinstance(found, Found)


def test_every_spec_status_has_an_explicit_mapping() -> None:
    """Each status the spec can return is mapped explicitly, so the unknown-label fallback is only for new labels."""
    spec = load_spec()
    status_schema = resolve(spec, spec["components"]["schemas"][MESSAGE_SCHEMA]["properties"]["status"])
    assert set(status_schema["enum"]) <= set(STATUS_LABELS)


@pytest.mark.parametrize(
    "direction", ["inbound", "outbound-api", "outbound-call", "outbound-reply"], ids=lambda d: d
)
async def test_direction_values_from_the_spec(direction: str) -> None:
    """Every outbound direction the spec lists can match a search, and inbound never does."""
    spec = load_spec()
    direction_schema = resolve(spec, spec["components"]["schemas"][MESSAGE_SCHEMA]["properties"]["direction"])
    assert set(direction_schema["enum"]) == {"inbound", "outbound-api", "outbound-call", "outbound-reply"}
    _, _, found = await serve({**full_message(spec), "direction": direction})
    if direction.startswith("outbound"):
        assert isinstance(found, Found)
    else:
        assert found.kind == "not_found"
        assert not isinstance(found, Unavailable)


def test_carried_extract_matches_the_full_spec() -> None:
    """The Messages extract the repo carries is, path for path and schema for schema, the official document."""
    extract = json.loads(EXTRACT_PATH.read_text(encoding="utf-8"))
    assert set(extract["paths"]) == {
        "/2010-04-01/Accounts/{AccountSid}/Messages.json",
        "/2010-04-01/Accounts/{AccountSid}/Messages/{Sid}.json",
    }
    if not FULL_SPEC_PATH.is_file():
        # Without the full document beside the repo, the extract itself is what the other tests use.
        assert MESSAGE_SCHEMA in extract["components"]["schemas"]
        return
    full = json.loads(FULL_SPEC_PATH.read_text(encoding="utf-8"))
    for path, operations in extract["paths"].items():
        assert operations == full["paths"][path], path
    for name, schema in extract["components"]["schemas"].items():
        assert schema == full["components"]["schemas"][name], name
