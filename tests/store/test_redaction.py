"""Redaction as the store's writer uses it on every value: skipping the patterns where they cannot match changes
nothing (`redact` against the full scan of every pattern)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from adapter_critic import redact as redaction

PIECES = st.sampled_from(["bearer ", "Bearer\t", "BEARER  ", "bEaReR ", "http://", "https://", "u:p@", "@", "://", " "])
TEXT = st.lists(st.one_of(PIECES, st.text(max_size=12), st.from_regex(r"[A-Za-z0-9._~+/-]{6,12}", fullmatch=True)))


def full_scan(text: str, values: list[str]) -> str:
    for value in values:
        if value in text:
            text = text.replace(value, redaction.MASK)
    text = redaction._BEARER.sub(rf"\g<1>{redaction.MASK}", text)
    return redaction._USERINFO.sub(rf"\g<1>{redaction.MASK}@", text)


@settings(max_examples=150, deadline=None)
@given(TEXT, st.lists(st.text(min_size=3, max_size=8), max_size=2))
def test_skipping_patterns_that_cannot_match_changes_nothing(parts: list[str], values: list[str]) -> None:
    text = "".join(parts)
    assert redaction.redact(text, values) == full_scan(text, values)
