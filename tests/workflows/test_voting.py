"""Self-consistency's extraction and vote as pure functions (`workflows.voting`), the reading of a consistency
judge's pick, self-refine's stop phrase and re2's re-read question: examples, then properties (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter_critic.workflows.re2 import reread
from adapter_critic.workflows.self_consistency import parse_pick
from adapter_critic.workflows.self_refine import says_stop
from adapter_critic.workflows.voting import ExtractError, extractor, normalise, normalise_number, tally


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("3 apples and 4 pears make 7 fruits.", "7"),
        ("The total is 1,000.", "1000"),
        ("So we get 1000.0", "1000"),
        ("That is -12 degrees.", "-12"),
        ("Pages 3-5", "5"),  # a range's dash is not a minus
        ("1,250,000 people", "1250000"),
        ("It costs $4.50.", "4.5"),
        ("About 2.5e3 of them", "2500"),
        ("x2 and v1.2.3 only", None),  # numbers glued to words are not answers
        ("No numbers here.", None),
        ("", None),
    ],
)
def test_last_number(text: str, answer: str | None) -> None:
    assert extractor("last_number")(text) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("So the answer is $\\boxed{42}$.", "42"),
        ("\\boxed{1} first, then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # the last one, braces balanced
        ("\\boxed{ 1,000 }", "1000"),
        ("\\boxed{Paris}", "paris"),
        ("\\boxed{never closed", None),
        ("no box", None),
    ],
)
def test_boxed(text: str, answer: str | None) -> None:
    assert extractor("boxed")(text) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Answer: B", "B"),
        ("...so the correct answer is **C**.", "C"),
        ("I'd pick (A) at first, but (D) fits.", "D"),
        ("The answer is (E)", "E"),
        ("Option A is wrong. Answer: C", "C"),
        ("B", "B"),
        ("**(b)**", None),  # lower case is no choice
        ("A cat sat on a mat.", None),  # an article is not a choice
        ("The answer is F", None),
    ],
)
def test_choice(text: str, answer: str | None) -> None:
    assert extractor("choice")(text) == answer


def test_regex_takes_the_last_match_and_its_first_group() -> None:
    assert extractor(r"regex:Final: (\w+)")("Final: cat\n...\nFinal: Dog") == "dog"
    assert extractor(r"regex:\d+ kg")("2 kg then 3 kg") == "3 kg"  # no group: the whole match
    assert extractor(r"regex:(x)|(y)")("y") is None  # the first group did not take part
    assert extractor(r"regex:Final: (\w+)")("nothing") is None


@pytest.mark.parametrize(
    ("path", "text", "answer"),
    [
        ("answer", '{"answer": 12}', "12"),
        ("answer", 'Here it is:\n```json\n{"answer": "Paris"}\n```', "paris"),
        ("result.items.1", 'Sure. {"result": {"items": ["a", 1000.0]}} Done.', "1000"),
        ("ok", '{"ok": true}', "true"),
        ("point", '{"point": {"y": 2, "x": 1}}', '{"x":1,"y":2}'),
        ("answer", '{"answer": null}', None),
        ("missing", '{"answer": 1}', None),
        ("answer.0", '{"answer": 1}', None),
        ("answer", "not json at all", None),
    ],
)
def test_json_path(path: str, text: str, answer: str | None) -> None:
    assert extractor(f"json:{path}")(text) == answer


@pytest.mark.parametrize("spec", ["median", "regex:", "regex:(", "json:", "json:a..b"])
def test_an_unusable_extractor_is_refused(spec: str) -> None:
    with pytest.raises(ExtractError):
        extractor(spec)


@pytest.mark.parametrize(
    ("text", "normal"),
    [("1,000", "1000"), ("1000.0", "1000"), ("+1e3", "1000"), ("-0.0", "0"), (".50", "0.5"), ("1e99", "1E+99")],
)
def test_numbers_compare_by_value(text: str, normal: str) -> None:
    assert normalise_number(text) == normal


def test_text_answers_compare_without_case_markup_or_spacing() -> None:
    assert normalise("  **New   York**. ") == normalise("new york") == "new york"
    assert normalise("`$42$`") == "42"
    assert normalise(" ** ") is None


def test_the_majority_wins_with_its_first_sample() -> None:
    vote = tally(["7", "8", "7", None, "7"])
    assert vote.votes == {"7": 3, "8": 1}
    assert vote.chosen == 0 and vote.tie is False


def test_a_tie_goes_to_the_answer_given_first() -> None:
    vote = tally([None, "8", "7", "7", "8"])
    assert vote.votes == {"8": 2, "7": 2}
    assert vote.chosen == 1 and vote.tie is True


def test_no_answers_no_vote() -> None:
    assert tally([None, None]).chosen is None and tally([]).votes == {}


@pytest.mark.parametrize(
    ("reply", "count", "pick"),
    [
        ("The most consistent response is Response 2", 3, 1),
        ("**The most consistent response is Response #3.** It agrees with 1.", 3, 2),
        ("the most consistent one is 1", 2, 0),
        ("Responses agree; Response 2 is closest.", 3, 1),
        ("Response 1 and Response 2 agree.", 3, None),  # two named, no verdict
        ("2", 3, 1),
        ("The most consistent response is Response 4", 3, None),  # out of range
        ("The most consistent response is Response 0", 3, None),
        ("I cannot tell.", 3, None),
    ],
)
def test_a_consistency_pick_is_read_tolerantly(reply: str, count: int, pick: int | None) -> None:
    assert parse_pick(reply, count) == pick


@pytest.mark.parametrize(
    ("feedback", "stop"),
    [
        ("NO CHANGES NEEDED", True),
        ("no changes needed.", True),
        ("```\nNO CHANGES NEEDED\n```", True),
        ("The reply is correct and complete.\n\n**NO CHANGES NEEDED**", True),
        ("No  changes\tneeded!", True),
        ("- Fix the sum.\n- Otherwise NO CHANGES NEEDED", False),  # not alone on its line: feedback to act on
        ("NO CHANGES NEEDED, except the typo in line 2.\n- Fix it.", False),
        ("- Add a source.", False),
        ("", False),
    ],
)
def test_the_stop_phrase_is_read_as_lgtm_is(feedback: str, stop: bool) -> None:
    assert says_stop(feedback, "NO CHANGES NEEDED") is stop


def test_re2_repeats_text_not_images() -> None:
    assert reread("What is 2 + 2?", "Again: ") == ("What is 2 + 2?\nAgain: What is 2 + 2?", "Again: What is 2 + 2?")
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    parts: list[Any] = [{"type": "text", "text": "How many cats?"}, image, {"type": "text", "text": "Be exact."}]
    content, added = reread(parts, "Again: ")
    assert content == [*parts, {"type": "text", "text": "\nAgain: How many cats?\nBe exact."}]
    assert added == "Again: How many cats?\nBe exact."
    assert reread([image], "Again: ") == ([image], None)  # nothing to read again
    assert reread("  ", "Again: ") == ("  ", None)
    assert reread(None, "Again: ") == (None, None)


# -- properties -------------------------------------------------------------------------------------------------

answers = st.lists(st.one_of(st.none(), st.sampled_from(["1", "2", "3", "x"])), max_size=16)


@given(answers)
def test_the_chosen_sample_gave_an_answer_no_other_outvotes(given_answers: list[str | None]) -> None:
    vote = tally(given_answers)
    if vote.chosen is None:
        assert all(answer is None for answer in given_answers)
        return
    winner = given_answers[vote.chosen]
    assert winner is not None
    assert vote.chosen == given_answers.index(winner)  # the first sample that gave it
    assert all(count <= vote.votes[winner] for count in vote.votes.values())
    tied = [answer for answer, count in vote.votes.items() if count == vote.votes[winner]]
    assert vote.tie is (len(tied) > 1)
    # Among the tied answers, the winner is the one given first.
    assert min(given_answers.index(answer) for answer in tied) == vote.chosen
    assert sum(vote.votes.values()) == sum(answer is not None for answer in given_answers)


@given(answers)
def test_unanswered_samples_never_change_the_vote(given_answers: list[str | None]) -> None:
    answered = [answer for answer in given_answers if answer is not None]
    with_gaps, without = tally(given_answers), tally(answered)
    assert with_gaps.votes == without.votes and with_gaps.tie is without.tie
    if with_gaps.chosen is not None:
        assert given_answers[with_gaps.chosen] == answered[without.chosen or 0]


@given(st.integers(min_value=-(10**12), max_value=10**12), st.integers(min_value=0, max_value=3))
def test_a_number_written_any_way_is_one_answer(value: int, zeros: int) -> None:
    grouped = f"{value:,}"
    decimal = f"{value}." + "0" * zeros if zeros else str(value)
    assert normalise_number(grouped) == normalise_number(decimal) == normalise_number(str(value)) == str(value)
    assert extractor("last_number")(f"so it is {grouped}.") == str(value)


@given(st.text(max_size=400))
def test_every_extractor_reads_any_text(text: str) -> None:
    for spec in ("last_number", "boxed", "choice", r"regex:(\d+)", "json:a.0"):
        answer = extractor(spec)(text)
        assert answer is None or (isinstance(answer, str) and answer)
    assert parse_pick(text, 5) in (None, 0, 1, 2, 3, 4)
    assert isinstance(says_stop(text, "NO CHANGES NEEDED"), bool)


@given(st.lists(st.text(max_size=60), min_size=1, max_size=8))
def test_samples_without_an_answer_leave_no_vote(texts: list[str]) -> None:
    unparseable = [text.replace("\\boxed{", "") for text in texts]
    vote = tally([extractor("boxed")(text) for text in unparseable])
    assert vote.chosen is None and vote.votes == {}


@given(
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10), lambda c: st.lists(c, max_size=3))
)
def test_json_answers_compare_by_value(value: Any) -> None:
    spaced = json.dumps({"answer": value}, indent=2)
    compact = json.dumps({"answer": value}, separators=(",", ":"))
    assert extractor("json:answer")(spaced) == extractor("json:answer")(compact)


def test_reading_a_huge_hostile_sample_finishes() -> None:
    hostile = "1," * 200_000 + "answer is " + " " * 100_000 + "(" * 50_000 + "most consistent " * 20_000
    for spec in ("last_number", "boxed", "choice"):
        extractor(spec)(hostile)
    assert parse_pick(hostile, 3) is None
