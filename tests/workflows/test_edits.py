from __future__ import annotations

import re

import pytest

from adapter_critic.workflows.edits import (
    MAX_EDIT_BLOCK_CHARS,
    MAX_EDIT_BLOCKS,
    Edit,
    EditError,
    apply_edits,
    is_lgtm,
    parse_edits,
    review,
)

from ..helpers import block

# --- is_lgtm ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        "lgtm",
        "LGTM",
        "Lgtm",
        "  lgtm \n",
        "lgtm.",
        "LGTM!",
        "lgtm!!",
        "`lgtm`",
        "``lgtm``",
        "**LGTM**",
        "*lgtm*",
        '"LGTM!"',
        "'lgtm'",
        "\u201cLGTM\u201d",
        "\u2018lgtm.\u2019",
        "\u201cLGTM.\u201d!",
        "```\nlgtm\n```",
        "```text\nLGTM\n```",
        "```text\n**LGTM.**\n```\n",
        "```lgtm```",
        "```lgtm\n```",
        "\n\n```\n`lgtm`\n```\n\n",
        '**"`lgtm`"**.',
        "\r\nLGTM\r\n",
    ],
)
def test_lgtm_variants(reply: str) -> None:
    assert is_lgtm(reply)


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "   ",
        "``````",
        "lgtm, but fix X",
        "LGTM but fix the typo",
        "Looks good to me",
        "lgtmx",
        "not lgtm",
        ".lgtm",  # only trailing dots are stripped
        "lgtm?",
        "l g t m",
        "```text\nlgtm\nmore\n```",
        "lgtm\nlgtm",
        block("a", "b"),
    ],
)
def test_not_lgtm(reply: str) -> None:
    assert not is_lgtm(reply)


def test_lgtm_check_is_fast_on_pathological_replies() -> None:
    replies = [" " * 200_000 + "x", "```a" * 100_000, ". " * 200_000 + "x", "`" * 200_000, "```\n" * 100_000]
    for reply in replies:
        assert not is_lgtm(reply)


# --- parse_edits ------------------------------------------------------------------------------------------------------


def test_single_block() -> None:
    assert parse_edits(block("old", "new")) == [Edit("old", "new")]


def test_multiple_blocks_in_order_with_prose_between() -> None:
    reply = "Two fixes.\n\n" + block("a", "b") + "\nAnd also:\n" + block("c\nd", "e\nf\ng") + "Done.\n"
    assert parse_edits(reply) == [Edit("a", "b"), Edit("c\nd", "e\nf\ng")]


@pytest.mark.parametrize("fence", ["```", "```text", "```diff", "````"])
def test_blocks_inside_code_fences(fence: str) -> None:
    reply = f"Here:\n{fence}\n{block('a', 'b')}```\n\nand\n\n{fence}\n{block('c', 'd')}```\nthanks"
    assert parse_edits(reply) == [Edit("a", "b"), Edit("c", "d")]


def test_crlf_reply() -> None:
    reply = block("line one\nline two", "new one\nnew two").replace("\n", "\r\n")
    assert parse_edits(reply) == [Edit("line one\nline two", "new one\nnew two")]


@pytest.mark.parametrize(
    ("start", "mid", "end"),
    [
        ("<<<<< SEARCH", "=====", ">>>>> REPLACE"),
        ("<<<<<<<<< SEARCH", "=========", ">>>>>>>>> REPLACE"),
        ("<<<<< SEARCH", "=========", ">>>>>>> REPLACE"),
        ("<<<<<<<<< SEARCH", "======", ">>>>> REPLACE"),
        ("<<<<<<<SEARCH", "=======", ">>>>>>>REPLACE"),
        ("<<<<<<< SEARCH  ", "=======\t", ">>>>>>> REPLACE "),
    ],
)
def test_marker_variants(start: str, mid: str, end: str) -> None:
    assert parse_edits(block("old", "new", start=start, mid=mid, end=end)) == [Edit("old", "new")]


@pytest.mark.parametrize("line", ["<<<< SEARCH", "<<<<<<<<<< SEARCH", " <<<<<<< SEARCH", "<<<<<<< search"])
def test_bad_search_markers_are_search_text(line: str) -> None:
    # A real SEARCH marker inside SEARCH text would be reported as "a second SEARCH line".
    reply = f"<<<<<<< SEARCH\n{line}\nold\n=======\nnew\n>>>>>>> REPLACE\n"
    assert parse_edits(reply) == [Edit(f"{line}\nold", "new")]


@pytest.mark.parametrize("line", ["<<<< SEARCH", "<<<<<<<<<< SEARCH"])
def test_bad_search_markers_start_no_block(line: str) -> None:
    with pytest.raises(EditError, match=r"^the reply is neither 'lgtm' nor SEARCH/REPLACE edit blocks"):
        parse_edits(f"{line}\nold\n")


@pytest.mark.parametrize("mid", ["====", "=========="])
def test_bad_dividers_are_search_text(mid: str) -> None:
    reply = f"<<<<<<< SEARCH\nold\n{mid}\nmore\n=======\nnew\n>>>>>>> REPLACE\n"
    assert parse_edits(reply) == [Edit(f"old\n{mid}\nmore", "new")]


@pytest.mark.parametrize("end", [">>>> REPLACE", ">>>>>>>>>> REPLACE"])
def test_bad_replace_markers_are_replace_text(end: str) -> None:
    reply = f"<<<<<<< SEARCH\nold\n=======\nnew\n{end}\n>>>>>>> REPLACE\n"
    assert parse_edits(reply) == [Edit("old", f"new\n{end}")]


def test_only_the_first_divider_separates() -> None:
    reply = "<<<<<<< SEARCH\nTitle\n=======\nHeading\n=======\n>>>>>>> REPLACE\n"
    assert parse_edits(reply) == [Edit("Title", "Heading\n=======")]


def test_stray_divider_outside_blocks_is_prose() -> None:
    reply = "Notes\n=======\n\n" + block("a", "b")
    assert parse_edits(reply) == [Edit("a", "b")]


def test_empty_replace() -> None:
    assert parse_edits("<<<<<<< SEARCH\nold\n=======\n>>>>>>> REPLACE") == [Edit("old", "")]


def test_multiline_search_and_replace_keep_inner_blank_lines() -> None:
    assert parse_edits(block("a\n\n  b", "c\n\n\nd")) == [Edit("a\n\n  b", "c\n\n\nd")]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("", "the reply is neither 'lgtm' nor SEARCH/REPLACE edit blocks"),
        ("I think the draft should be shorter.", "the reply is neither 'lgtm' nor SEARCH/REPLACE edit blocks"),
        ("<<<<<<< SEARCH\n=======\nnew\n>>>>>>> REPLACE\n", "edit block 1: the SEARCH text is empty"),
        ("<<<<<<< SEARCH\n  \n\t\n=======\nnew\n>>>>>>> REPLACE\n", "edit block 1: the SEARCH text is empty"),
        (block("a", "b") + block(" ", "c"), "edit block 2: the SEARCH text is empty"),
        ("<<<<<<< SEARCH\nold\n", "edit block 1 never ends: no '=======' line"),
        ("<<<<<<< SEARCH\nold\n=======\nnew\n", "edit block 1 never ends: no '>>>>>>> REPLACE' line"),
        (block("a", "b") + "<<<<<<< SEARCH\nc\n=======\nd", "edit block 2 never ends: no '>>>>>>> REPLACE' line"),
        (
            "<<<<<<< SEARCH\na\n=======\nb\n" + block("c", "d"),
            "edit block 1 never ends: no '>>>>>>> REPLACE' line before the next",
        ),
        ("<<<<<<< SEARCH\na\n>>>>>>> REPLACE\n", "edit block 1: a '>>>>>>> REPLACE' line before its '=======' line"),
        ("<<<<<<< SEARCH\na\n<<<<<<< SEARCH\n", "edit block 1: a second '<<<<<<< SEARCH' line"),
        ("=======\nb\n>>>>>>> REPLACE\n", "edit block 1: a '>>>>>>> REPLACE' line without a '<<<<<<< SEARCH'"),
    ],
)
def test_invalid_replies(reply: str, reason: str) -> None:
    with pytest.raises(EditError, match="^" + re.escape(reason)):
        parse_edits(reply)


def test_edit_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_edits("nope")


def test_parse_is_fast_on_pathological_replies() -> None:
    replies = [
        "<" * 500_000,
        "<<<<<<<" + " " * 500_000 + "x",
        ("<<<<<<< SEARCH\n" + "=" * 8 + " " * 50 + "x\n") * 20_000,
        "\n".join(["<<<<<<< SEARCH", *["x"] * 200_000, "======="]),
    ]
    for reply in replies:
        with pytest.raises(EditError):
            parse_edits(reply)


# --- apply_edits ------------------------------------------------------------------------------------------------------


def test_replace_exact_substring() -> None:
    assert apply_edits("The cat sat.", [Edit("cat", "dog")]) == "The dog sat."


def test_first_occurrence_only() -> None:
    assert apply_edits("a b a b a", [Edit("a", "X")]) == "X b a b a"


def test_multiline_replace() -> None:
    draft = "one\ntwo\nthree\nfour\n"
    assert apply_edits(draft, [Edit("two\nthree", "2\n2.5\n3")]) == "one\n2\n2.5\n3\nfour\n"


def test_sequential_application_sees_previous_result() -> None:
    edits = [Edit("alpha", "beta"), Edit("beta gamma", "delta")]
    assert apply_edits("alpha gamma", edits) == "delta"


def test_later_block_can_edit_text_inserted_by_earlier_block() -> None:
    assert apply_edits("x", [Edit("x", "x NEW"), Edit("NEW", "newer")]) == "x newer"


def test_sequential_first_occurrence_moves_on() -> None:
    assert apply_edits("a a a", [Edit("a", "b"), Edit("a", "c")]) == "b c a"


def test_empty_replace_deletes_substring() -> None:
    assert apply_edits("very very good", [Edit("very ", "")]) == "very good"


@pytest.mark.parametrize(
    ("draft", "search", "expected"),
    [
        ("a\nb\nc\n", "b", "a\nc\n"),
        ("a\nb\nc", "b\nc", "a"),
        ("a\nb\nc", "a", "b\nc"),
        ("a\nb\nc", "c", "a\nb"),
        ("a\nb\nc\n", "b\n", "a\nc\n"),
        ("a\r\nb\r\nc\r\n", "b", "a\r\nc\r\n"),
        ("a\r\nb\r\nc", "c", "a\r\nb"),
        ("only", "only", ""),
        ("a\nb  \nc\n", "b", "a\n  \nc\n"),  # not a whole line: only the text goes
    ],
)
def test_empty_replace_deleting_whole_lines_leaves_no_blank_line(draft: str, search: str, expected: str) -> None:
    assert apply_edits(draft, [Edit(search, "")]) == expected


@pytest.mark.parametrize(
    ("draft", "search", "replace", "expected"),
    [
        # the draft has trailing whitespace the SEARCH lacks
        (
            "def f():  \n    return 1   \nend\n",
            "def f():\n    return 1",
            "def g():\n    return 2",
            "def g():\n    return 2\nend\n",
        ),
        # the SEARCH has trailing whitespace the draft lacks
        ("one\ntwo\nthree\n", "two   \nthree\t", "2\n3", "one\n2\n3\n"),
        ("one\ntwo\nthree", "two \nthree ", "2\n3", "one\n2\n3"),
        # a SEARCH ending in a line break takes the line break of the run's last line with it
        ("a \nb\nc\n", "a\n", "z\n", "z\nb\nc\n"),
        ("a \nb\nc\n", "a\n", "", "b\nc\n"),
    ],
)
def test_whitespace_tolerant_line_match(draft: str, search: str, replace: str, expected: str) -> None:
    assert apply_edits(draft, [Edit(search, replace)]) == expected


@pytest.mark.parametrize(
    ("draft", "search"),
    [
        ("xa  \nb\n", "a\nb"),  # the line match compares whole lines, not line ends
        ("a\n  b\n", "a\nb"),  # leading whitespace still counts
        ("a\n\nb\n", "a\nb"),  # so do blank lines
    ],
)
def test_line_match_is_only_trailing_whitespace_tolerant(draft: str, search: str) -> None:
    with pytest.raises(EditError, match="not found"):
        apply_edits(draft, [Edit(search, "Q")])


def test_line_match_preserves_following_text_and_its_line_break() -> None:
    draft = "head\nkeep me  \nalso  \ntail line\nend"
    assert apply_edits(draft, [Edit("keep me\nalso", "replaced")]) == "head\nreplaced\ntail line\nend"


def test_line_match_takes_first_matching_run() -> None:
    draft = "x \ny\nx \ny\n"
    assert apply_edits(draft, [Edit("x\ny", "Z")]) == "Z\nx \ny\n"


def test_exact_match_wins_over_line_match() -> None:
    assert apply_edits("ab\nb \n", [Edit("b", "C")]) == "aC\nb \n"


@pytest.mark.parametrize(
    ("draft", "edit", "expected"),
    [
        ("a\r\nb\r\nc\r\n", Edit("b", "B"), "a\r\nB\r\nc\r\n"),
        ("a\r\nb\r\nc\r\n", Edit("a\nb", "x\ny\nz"), "x\r\ny\r\nz\r\nc\r\n"),
        ("a\r\nb  \r\nc\r\n", Edit("a\nb", "x\ny"), "x\r\ny  \r\nc\r\n"),  # exact match first
        ("a  \r\nb\r\nc\r\n", Edit("a\nb", "x\ny"), "x\r\ny\r\nc\r\n"),  # then the line match
        ("a\nb\r\nc\n", Edit("a\nb", "x"), "x\r\nc\n"),  # mixed endings: line match, CR read as whitespace
    ],
)
def test_crlf_draft(draft: str, edit: Edit, expected: str) -> None:
    assert apply_edits(draft, [edit]) == expected


def test_crlf_reply_against_crlf_draft() -> None:
    reply = block("one\ntwo", "uno\ndos").replace("\n", "\r\n")
    assert review("zero\r\none\r\ntwo\r\nthree\r\n", reply) == "zero\r\nuno\r\ndos\r\nthree\r\n"


def test_not_found_names_block_and_quotes_search() -> None:
    edits = [Edit("a", "b"), Edit("missing text", "x")]
    with pytest.raises(EditError) as info:
        apply_edits("a c", edits)
    assert str(info.value) == "edit block 2: SEARCH text not found in the draft: 'missing text'"


def test_not_found_after_earlier_block_changed_the_text() -> None:
    with pytest.raises(EditError, match=r"^edit block 2: SEARCH text not found"):
        apply_edits("foo bar", [Edit("foo", "baz"), Edit("foo", "qux")])


def test_not_found_quote_is_truncated() -> None:
    search = "z" * 500
    with pytest.raises(EditError) as info:
        apply_edits("draft", [Edit(search, "x")])
    message = str(info.value)
    assert message.startswith("edit block 1: SEARCH text not found in the draft: 'zzz")
    assert message.count("z") <= 90
    assert len(message) < 160


def test_empty_search_edit_is_rejected_by_apply() -> None:
    with pytest.raises(EditError, match=r"^edit block 1: the SEARCH text is empty"):
        apply_edits("text", [Edit("  \n", "x")])


def test_no_edits_returns_text() -> None:
    assert apply_edits("text", []) == "text"


def test_line_match_is_fast_on_pathological_drafts() -> None:
    draft = "a\n" * 200_000
    search = "a\n" * 50_000 + "b"
    with pytest.raises(EditError):
        apply_edits(draft, [Edit(search, "x")])


# --- review -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reply", ["lgtm", "**LGTM**", "```\nlgtm\n```"])
def test_review_lgtm_returns_draft_unchanged(reply: str) -> None:
    draft = "A draft with lgtm in it and  trailing spaces  \r\n"
    assert review(draft, reply) is draft


def test_review_applies_blocks() -> None:
    reply = "Fix:\n```\n" + block("teh", "the") + block("recieve", "receive") + "```\n"
    assert review("teh cat will recieve", reply) == "the cat will receive"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("lgtm, but fix the typo", "the reply is neither 'lgtm' nor SEARCH/REPLACE edit blocks"),
        (block("absent", "x"), "edit block 1: SEARCH text not found in the draft: 'absent'"),
        ("<<<<<<< SEARCH\ndraft\n", "edit block 1 never ends"),
    ],
)
def test_review_invalid(reply: str, reason: str) -> None:
    with pytest.raises(EditError) as info:
        review("the draft", reply)
    assert str(info.value).startswith(reason)


# -- limits ------------------------------------------------------------------------------------------------------------


def test_edit_block_count_and_size_are_limited() -> None:
    draft = "\n".join(f"line {i}" for i in range(MAX_EDIT_BLOCKS + 1))
    fine = "".join(block(f"line {i}") for i in range(MAX_EDIT_BLOCKS))
    assert len(parse_edits(fine)) == MAX_EDIT_BLOCKS
    with pytest.raises(EditError, match="more than 100 edit blocks"):
        parse_edits(fine + block(f"line {MAX_EDIT_BLOCKS}"))
    with pytest.raises(EditError, match="edit block 1: the SEARCH text is longer than"):
        parse_edits(block("a" * (MAX_EDIT_BLOCK_CHARS + 1)))
    with pytest.raises(EditError, match="edit block 2: the REPLACE text is longer than"):
        review(draft, block("line 1") + block("line 2", "b" * (MAX_EDIT_BLOCK_CHARS + 1)))
    edits = parse_edits(fine)
    with pytest.raises(EditError, match="more than 100 edit blocks"):
        apply_edits(draft, [*edits, edits[0]])


def test_many_edits_on_a_huge_draft_are_refused_not_ground_through() -> None:
    huge = "\n".join(f"line {i} text" for i in range(1_000_000))  # 16 MB
    reply = "".join(block(f"line {999_900 + i} text") for i in range(50))
    # Refused up front by the work cap (the message says so), not after 50 scans of 16 MB.
    with pytest.raises(EditError, match="too many for a draft this long"):
        review(huge, reply)
    assert review(huge, block("line 999999 text", "last")).endswith("\nlast")
