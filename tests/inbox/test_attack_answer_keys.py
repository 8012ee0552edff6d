"""An answer's key, attacked: only the key exactly as the store makes it (``RUN:OFFSET``,
ASCII digits, no leading zero) names a question, so a question is answered once whatever
the spelling, and no key is an internal error (hypothesis over any text)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.inbox.answers import AnswerRefused, claim
from tether.inbox.store import InboxStore, open_store

QUESTION = '{"type":"approval_request","reason":"may I?"}'


def _store(path: Path) -> InboxStore:
    store = open_store(path)
    store.insert_rows("r", 1.0, [(3, "approval_request", QUESTION)])
    return store


@pytest.mark.parametrize("spelling", ["r:03", "r:٣", "r:+3", "r: 3", "r:3 ", "r:0003"])
def test_attack_a_question_is_answered_once_whatever_the_keys_spelling(
    tmp_path: Path, spelling: str
) -> None:
    with _store(tmp_path / "t.db") as store:
        assert claim(store, "r:3", "r", "approve", "approve")[0] == "approval_request"
        with pytest.raises(AnswerRefused):
            claim(store, spelling, "r", "deny", "deny")  # before: a second answer, recorded


@settings(max_examples=300, deadline=None)
@given(key=st.text(max_size=40) | st.from_regex(r"r:[0-9]{15,40}", fullmatch=True))
def test_attack_no_key_is_an_internal_error(
    tmp_path_factory: pytest.TempPathFactory, key: str
) -> None:
    with _store(tmp_path_factory.mktemp("k") / "t.db") as store:
        found = store.message(key)
        assert found is None or key == "r:3"  # before: OverflowError past 19 digits
