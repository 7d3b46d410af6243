"""Templates as published contracts: immutable versions, `latest` resolved at creation, typed
render data validated before anything starts, and the preview command."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from herald.intake import template_registry as templates
from herald.intake.errors import InvalidIntent
from herald.intake.requests import build_intent, parse_request
from herald.intake.template_registry import (
    PublishRefused,
    TemplateError,
    available_templates,
    load_template,
    publish,
    render,
)
from tests.keys import SESSION_KEYRING

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ORDER = {"order_ref": "A-1", "order_total": "EUR 18.00", "item_count": 2}
NEW_VERSION = """# A test version.
# segments: 1
# field order_ref: code pattern=^[A-Za-z0-9_.-]{1,40}$
Order ${order_ref} is on its way.
"""


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    """A copy of the shipped templates to publish into."""
    root = tmp_path / "templates"
    shutil.copytree(REPO / "herald" / "templates", root)
    return root


def request(**overrides: object) -> dict[str, object]:
    return {"business_key": "seller_new_order:ord_1", "recipient": "+15551230001", "template_id": "seller_new_order",
            "template_version": 2, "render_data": ORDER, **overrides}  # fmt: skip


def test_every_shipped_version_matches_its_published_hash() -> None:
    for template_id, versions in available_templates().items():
        for version in versions:
            assert load_template(template_id, version).version == version


def test_publishing_other_content_under_an_existing_version_is_refused(registry: Path) -> None:
    original = (registry / "order_receipt" / "v1.txt").read_text()
    with pytest.raises(PublishRefused, match="never changes: publish v2"):
        publish("order_receipt", 1, original.replace("Thank you.", "Thanks!"), root=registry)
    assert (registry / "order_receipt" / "v1.txt").read_text() == original
    # The same content again changes nothing.
    assert publish("order_receipt", 1, original, root=registry) is False


def test_a_new_version_is_published_with_its_hash(registry: Path) -> None:
    assert publish("order_shipped", 1, NEW_VERSION, root=registry) is True
    assert (registry / "order_shipped" / "v1.txt").read_text() == NEW_VERSION
    assert "order_shipped/v1" in (registry / "published.json").read_text()


def test_a_version_whose_contract_does_not_match_its_body_is_refused(registry: Path) -> None:
    with pytest.raises(PublishRefused, match="placeholders"):
        publish("order_shipped", 1, NEW_VERSION.replace("${order_ref}", "${order_id}"), root=registry)


def test_a_file_changed_after_publication_is_refused_not_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    load_template.cache_clear()
    recorded = dict(templates.published())
    recorded["order_receipt/v1"] = "0" * 64
    monkeypatch.setattr(templates, "published", lambda: recorded)
    try:
        with pytest.raises(TemplateError, match="differs from its published content"):
            load_template("order_receipt", 1)
    finally:
        load_template.cache_clear()


def test_latest_resolves_when_the_intent_is_created_and_is_never_stored() -> None:
    latest = build_intent(parse_request(request(template_version="latest")), NOW, SESSION_KEYRING)
    explicit = build_intent(parse_request(request(template_version=2)), NOW, SESSION_KEYRING)
    assert latest.template_version == 2
    assert latest.intent_fingerprint == explicit.intent_fingerprint  # one intent, however it was named
    # An intent of v1 still renders v1 after v2 was published: versions never move under it.
    v1 = build_intent(
        parse_request(request(template_version=1, render_data={"order_ref": "A-1", "order_total": "EUR 18.00"})),
        NOW,
        SESSION_KEYRING,
    )
    assert v1.template_version == 1 and "item(s)" not in v1.message.body


_ASCII_RULE = "must be a whole number written in ASCII digits, with an optional leading minus"


@pytest.mark.parametrize(
    "render_data,problem",
    [
        ({"order_ref": "A-1", "order_total": "EUR 18.00"}, ("render_data.item_count", "required by the template")),
        ({**ORDER, "item_count": "two"}, ("render_data.item_count", _ASCII_RULE)),
        ({**ORDER, "item_count": "\u0663"}, ("render_data.item_count", _ASCII_RULE)),  # Arabic-Indic three
        ({**ORDER, "item_count": "5_000"}, ("render_data.item_count", _ASCII_RULE)),
        ({**ORDER, "item_count": "+5"}, ("render_data.item_count", _ASCII_RULE)),
        ({**ORDER, "item_count": " 5"}, ("render_data.item_count", _ASCII_RULE)),
        ({**ORDER, "item_count": 0}, ("render_data.item_count", "Input should be greater than or equal to 1")),
        ({**ORDER, "order_total": "x" * 10_000}, ("render_data.order_total", "must be at most 500 characters")),
        ({**ORDER, "order_total": "x" * 31}, ("render_data.order_total", "String should have at most 30 characters")),
        ({**ORDER, "order_ref": "'; DROP TABLE intents;--"}, ("render_data.order_ref", "String should match pattern '^[A-Za-z0-9_.-]{1,40}$'")),
        ({**ORDER, "coupon": "X"}, ("render_data.coupon", "not a field of the template")),
    ],
    ids=["missing", "wrong-type", "arabic-indic", "underscore", "plus", "space", "below-minimum", "10kb", "over-the-field-max", "sql-in-a-code", "unknown-field"],
)
def test_render_data_breaking_the_contract_is_refused_by_field_path(render_data: dict[str, object], problem: tuple[str, str]) -> None:
    with pytest.raises(InvalidIntent) as refused:
        build_intent(parse_request(request(render_data=render_data)), NOW, SESSION_KEYRING)
    assert problem in refused.value.problems
    assert "x" * 100 not in str(refused.value) and "DROP TABLE" not in str(refused.value)


def test_template_syntax_in_text_renders_literally() -> None:
    assert render("seller_new_order", 2, {**ORDER, "order_total": "${order_ref}"}).count("${order_ref}") == 1


@pytest.mark.parametrize("version", [0, 100_000, True, 1.0, "1", None], ids=repr)
def test_a_bad_version_names_the_rule(version: object) -> None:
    """Only a whole number from 1 to 99999 or 'latest': true, 1.0 and "1" are not taken as version 1."""
    with pytest.raises(InvalidIntent) as refused:
        parse_request(request(template_version=version))
    assert refused.value.problems == [
        ("template_version", "must be a published version number (1 to 99999) or 'latest'")
    ]


@pytest.mark.parametrize(
    ("template_id", "version"),
    [("../../../escaped", 1), ("promo/vip_offer", 1), ("Order", 1), ("x" * 65, 1), ("ok_id", 0), ("ok_id", 100_000)],
)
def test_publish_refuses_an_id_or_version_that_is_not_an_identifier_and_writes_nothing(
    registry: Path, template_id: str, version: int
) -> None:
    """An id is a lower-case identifier and a version 1 to 99999: nothing is written, inside the
    templates folder or outside it, and the record is unchanged."""
    before = sorted(path for path in registry.parent.rglob("*"))
    record = (registry / "published.json").read_text()
    with pytest.raises(PublishRefused, match=r"^template_(id|version): must"):
        publish(template_id, version, NEW_VERSION, root=registry)
    assert sorted(path for path in registry.parent.rglob("*")) == before
    assert (registry / "published.json").read_text() == record


def test_a_hand_edited_record_that_is_not_an_id_and_version_breaks_no_latest(monkeypatch: pytest.MonkeyPatch, registry: Path) -> None:
    """published.json edited by hand with a key that is no `<id>/v<N>`: it is ignored, and every other
    template's `latest` still resolves (it used to fail every request with an internal error)."""
    record_path = registry / "published.json"
    record = {**json.loads(record_path.read_text()), "promo/vip_offer/v1": "0" * 64, "bad": 7}
    record_path.write_text(json.dumps(record))
    monkeypatch.setattr(templates, "_root", lambda: registry)
    templates.published.cache_clear()
    try:
        assert "promo" not in available_templates()
        assert templates.resolve_version("seller_new_order", "latest") == max(available_templates()["seller_new_order"])
    finally:
        templates.published.cache_clear()


def test_the_cli_names_a_bad_template_id_by_its_argument_without_echoing_it() -> None:
    """`template publish ../../../x 1 FILE` and `template preview 'promo/vip' latest`: one line naming
    TEMPLATE_ID and the rule, the path never echoed, nothing written."""
    # Where the path would lead from the checkout: compared before and after (a folder of that name may
    # already exist there: /tmp/x in a clone under /tmp), never assumed absent.
    target = REPO.parent / "x"
    before = target.stat().st_mtime_ns if target.exists() else None
    for argv in (["publish", "../../../x", "1", "README.md"], ["preview", "promo/vip", "latest"]):
        refused = subprocess.run(
            [sys.executable, "starter.py", "template", *argv], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1 and "TEMPLATE_ID: must be lower-case letters" in refused.stderr
        assert argv[1] not in refused.stderr
    assert (target.stat().st_mtime_ns if target.exists() else None) == before


def test_the_preview_prints_encoding_and_segments_without_any_service() -> None:
    shown = subprocess.run(
        [sys.executable, "starter.py", "template", "preview", "seller_new_order", "latest",
         "--data", "order_ref=A-1", "--data", "order_total=EUR 18.00", "--data", "item_count=2"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "seller_new_order v2 (sms)" in shown.stdout
    assert "cost        1 segment (GSM-7, 77 septets); the template allows 2" in shown.stdout
    refused = subprocess.run(
        [sys.executable, "starter.py", "template", "preview", "seller_new_order", "2", "--data", "order_ref=A-1"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "render_data.order_total: required by the template" in refused.stderr


def test_text_holding_an_unpaired_surrogate_is_refused_by_rule_and_nothing_is_written(registry: Path) -> None:
    """Found by the entry-point search: publishing '\\ud800' raised UnicodeEncodeError."""
    before = sorted(path.relative_to(registry) for path in registry.rglob("*"))
    with pytest.raises(PublishRefused, match=r"^text: must be UTF-8 text"):
        publish("promo_offer", 1, "Hello \ud800", root=registry)
    assert sorted(path.relative_to(registry) for path in registry.rglob("*")) == before
