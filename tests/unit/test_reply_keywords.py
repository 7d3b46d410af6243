"""Reply classification: Twilio's default keywords, whole message, any case, trimmed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from herald.core.reply_keywords import HELP_KEYWORDS, OPT_IN_KEYWORDS, OPT_OUT_KEYWORDS, classify_reply

KEYWORDS = sorted(OPT_OUT_KEYWORDS | OPT_IN_KEYWORDS | HELP_KEYWORDS)


def test_the_whole_message_is_the_keyword() -> None:
    assert classify_reply(" Stop ") == ("opt_out", "STOP")
    assert classify_reply("stopall\n") == ("opt_out", "STOPALL")
    assert classify_reply("revoke") == ("opt_out", "REVOKE")
    assert classify_reply("Unstop") == ("opt_in", "UNSTOP")
    assert classify_reply("info") == ("help", "INFO")
    assert classify_reply("stop please") == ("other", None)
    assert classify_reply("STOP.") == ("other", None)
    assert classify_reply("") == ("other", None)
    # Unicode letters that upper-case to ASCII ones are not the keyword.
    assert classify_reply("\u017ftop") == ("other", None)
    assert classify_reply("\ufb06op") == ("other", None)


def test_twilios_own_classification_wins_when_given() -> None:
    # Advanced Opt-Out with a custom keyword ("ARRET") reports OptOutType=STOP.
    assert classify_reply("ARRET", "STOP") == ("opt_out", "STOP")
    assert classify_reply("stop", "bogus") == ("opt_out", "STOP")


@given(st.sampled_from(KEYWORDS), st.text(" \t\r\n", max_size=3), st.text(" \t\r\n", max_size=3), st.booleans())
def test_any_case_and_surrounding_whitespace(keyword: str, before: str, after: str, lower: bool) -> None:
    kind, word = classify_reply(before + (keyword.lower() if lower else keyword) + after)
    assert word == keyword and kind != "other"


@given(st.text(max_size=40))
def test_anything_else_is_other_and_never_raises(body: str) -> None:
    kind, word = classify_reply(body)
    assert (kind == "other") == (not body.strip().isascii() or body.strip().upper() not in KEYWORDS)
