"""Infobip's vocabulary as Herald reads it: status names onto ProviderStatus, retryability by status and error,
and the callbackData HMAC that authenticates each report."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretBytes

from herald.core.outcomes import ProviderStatus
from herald.providers.infobip_codes import DUPLICATE_MESSAGE_ID, GROUPS, STATUSES, is_retryable, map_status
from herald.providers.infobip_signature import MAX_CALLBACK_DATA_CHARS, CallbackKeys
from herald.providers.report_vocabularies import vocabulary_for
from herald.settings import InfobipWebhookSettings
from tests.depth import examples

Q, S, D = ProviderStatus.QUEUED, ProviderStatus.SENT, ProviderStatus.DELIVERED
U, F = ProviderStatus.UNDELIVERED, ProviderStatus.FAILED

TABLE = [
    # (status name, error id, Herald's status, retryable)
    ("PENDING_ACCEPTED", None, Q, False),
    ("PENDING_WAITING_DELIVERY", None, S, False),
    ("PENDING_ENROUTE", None, S, False),
    ("DELIVERED_TO_OPERATOR", None, S, False),
    ("DELIVERED_TO_HANDSET", None, D, False),
    ("UNDELIVERABLE_NOT_DELIVERED", 27, U, True),  # EC_ABSENT_SUBSCRIBER, not permanent
    ("UNDELIVERABLE_NOT_DELIVERED", 1, U, False),  # EC_UNKNOWN_SUBSCRIBER, permanent
    ("UNDELIVERABLE_NOT_DELIVERED", None, U, False),  # no error: nothing says it would go through
    ("UNDELIVERABLE_NOT_DELIVERED", 99_999, U, False),  # an error Herald does not know
    ("UNDELIVERABLE_REJECTED_OPERATOR", 632, U, False),
    ("EXPIRED_EXPIRED", 4098, U, True),  # EC_VP_EXPIRED, not permanent
    ("EXPIRED_EXPIRED", 4101, U, False),  # EC_VALIDITY_EXPIRED, permanent
    ("EXPIRED_DLR_UNKNOWN", 4098, U, False),  # may have been delivered: never a second copy
    (DUPLICATE_MESSAGE_ID, None, Q, False),  # the id exists: not a failure of this message
    (DUPLICATE_MESSAGE_ID, 5492, Q, False),
    ("REJECTED_NOT_ENOUGH_CREDITS", None, F, True),
    ("REJECTED_NOT_ENOUGH_CREDITS", 4103, F, False),  # a permanent error wins over the status
    ("REJECTED_SYSTEM_ERROR", None, F, True),
    ("REJECTED_FLOODING_FILTER", None, F, True),
    ("REJECTED_DND", 27, F, False),  # a refusal of this number: never, whatever the error
    ("REJECTED_DESTINATION", None, F, False),
    ("SIGNALS_BLOCKED", None, F, False),
    ("MISSING_TO", None, F, False),
    # Names Infobip adds later map by their group's prefix; anything else is the non-final floor.
    ("EXPIRED_SOMETHING_NEW", 4098, U, True),
    ("REJECTED_SOMETHING_NEW", None, F, False),
    ("DELIVERED_SOMEWHERE_NEW", None, S, False),
    ("PENDING", None, Q, False),
    ("REJECTED", None, F, False),
    ("DELIVEREDX", None, Q, False),
    ("whatever", None, Q, False),
]


@pytest.mark.parametrize(("label", "error", "status", "retryable"), TABLE, ids=[f"{r[0]}-{r[1]}" for r in TABLE])
def test_the_vocabulary_table(label: str, error: int | None, status: ProviderStatus, retryable: bool) -> None:
    """Each status name and error id means what the table says, read through the report vocabulary
    the receipt path uses for 'infobip' rows as well as directly."""
    vocabulary = vocabulary_for("infobip")
    assert vocabulary is not None
    assert map_status(label) is status and vocabulary.map_status(label) is status
    assert is_retryable(label, error) is retryable and vocabulary.is_retryable(label, error) is retryable


def test_a_missing_label_is_the_lowest_non_final_rank() -> None:
    """No label at all can neither end an attempt nor move a status backwards."""
    assert map_status(None) is Q and not is_retryable(None, 27)


def test_the_duplicate_message_id_is_neither_final_nor_a_failure() -> None:
    """REJECTED_DUPLICATE_MESSAGE_ID names a message that exists: it ends nothing and fails nothing."""
    assert not map_status(DUPLICATE_MESSAGE_ID).is_final
    assert STATUSES[DUPLICATE_MESSAGE_ID].group_id == 5 and STATUSES[DUPLICATE_MESSAGE_ID].status_id == 23


def test_every_table_entry_sits_in_the_group_its_name_names() -> None:
    """Each named status is in the group its prefix says (group ids 1 PENDING to 5 REJECTED), and the
    table's status for it is its group's or a stricter reading of it."""
    group_ids = {"PENDING": 1, "UNDELIVERABLE": 2, "DELIVERED": 3, "EXPIRED": 4, "REJECTED": 5}
    for name, entry in STATUSES.items():
        group = next((g for g in group_ids if name.startswith(g + "_")), None)
        if group is not None and name != "UNDELIVERABLE_REJECTED_PLATFORM":  # listed in group 5 by Infobip
            assert entry.group_id == group_ids[group], name
        if group in ("UNDELIVERABLE", "EXPIRED", "REJECTED") and name != DUPLICATE_MESSAGE_ID:
            assert entry.status.is_final and entry.status is not D, name
    assert set(GROUPS) == {"ACCEPTED", "PENDING", "DELIVERED", "UNDELIVERABLE", "EXPIRED", "REJECTED"}


# ---- callbackData ----------------------------------------------------------------------------------

OLD = {"old": SecretBytes(bytes(range(32)))}
NEW = {"new": SecretBytes(bytes(range(1, 33)))}
REF = "att_0123456789abcdef01234567_1"


def keys(ring: dict[str, SecretBytes], active: str | None = None) -> CallbackKeys:
    made = CallbackKeys.configured(ring, active)
    assert made is not None
    return made


def test_callback_data_verifies_for_its_own_message_id_only() -> None:
    """Signed for one id, it verifies for that id, not another, not under another key, not altered."""
    signer = keys(OLD)
    data = signer.sign(REF)
    assert data.startswith("hb1:old:") and len(data) <= MAX_CALLBACK_DATA_CHARS
    assert signer.verify(REF, data)
    assert not signer.verify("att_0123456789abcdef01234567_2", data)
    assert not keys(NEW).verify(REF, data)
    assert not signer.verify(REF, data[:-1] + ("A" if data[-1] != "A" else "B"))
    assert not signer.verify(REF, data.replace("hb1:", "hb2:"))
    assert not signer.verify(REF, None) and not signer.verify(REF, "")


def test_a_rotated_ring_still_verifies_what_the_old_key_signed() -> None:
    """With the new key active and the old one kept, old callbackData verifies and new is signed by the new key."""
    before = keys(OLD).sign(REF)
    ring = keys({**OLD, **NEW}, "new")
    assert ring.verify(REF, before) and ring.sign(REF).startswith("hb1:new:")


def test_the_section_without_keys_gives_no_key_set() -> None:
    """No HERALD_INFOBIP_WEBHOOK_KEYS: nothing can be signed or verified (the adapter and route refuse)."""
    assert CallbackKeys.from_settings(InfobipWebhookSettings()) is None


@settings(max_examples=examples(400), deadline=None)
@given(message_id=st.text(max_size=60), data=st.text(max_size=200))
def test_verify_never_raises_and_never_accepts_what_it_did_not_sign(message_id: str, data: str) -> None:
    """Any id and any callbackData (lone surrogates, NUL, huge): a plain False unless it is the signature."""
    signer = keys(OLD)
    assert signer.verify(message_id, data) is False
