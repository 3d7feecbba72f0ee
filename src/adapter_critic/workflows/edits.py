"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The adapter reviewer's reply format: whether a reply means "lgtm", parsing its SEARCH/REPLACE edit blocks, and
applying them to the draft.

A reply is either `lgtm` (the draft stands as it is) or one or more edit blocks, anywhere in the reply, fenced or not::

    <<<<<<< SEARCH
    exact text from the draft
    =======
    replacement text
    >>>>>>> REPLACE

Blocks apply in order, each to the result of the previous one, and each replaces the first occurrence of its SEARCH
text; if the text has no exact occurrence, SEARCH may instead match a run of whole lines compared without trailing
whitespace.  An empty REPLACE deletes, and when it deletes whole lines their line break goes too, so no blank line is
left behind.  Anything else is an invalid review and raises `EditError`, whose message is short enough to hand back to
the adapter model as feedback and to report to users as `adapter_rejection_reason`.

Line endings: the reply's CRLFs are read as LFs before parsing; the draft is never normalised.  When the text being
edited contains a CRLF, the line breaks of SEARCH and REPLACE are taken as CRLF, so a CRLF draft matches multi-line
SEARCH text and stays CRLF after editing.  In the line match a CR is trailing whitespace, so drafts with mixed line
endings still match whole lines.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import AdapterCriticError

__all__ = [
    "MAX_EDIT_BLOCKS",
    "MAX_EDIT_BLOCK_CHARS",
    "Edit",
    "EditError",
    "apply_edits",
    "is_lgtm",
    "is_only",
    "parse_edits",
    "review",
]

# Applying a block costs a scan of the whole text, so a reply's cost grows with blocks x draft size: these keep one
# (hostile or runaway) adapter reply from pinning a core. Real reviews have a handful of blocks of a few lines.
MAX_EDIT_BLOCKS = 100
MAX_EDIT_BLOCK_CHARS = 100_000  # of SEARCH, and of REPLACE, each
# Blocks x characters of text they may scan (under 0.1 s): 100 blocks on a 200 kB draft, 2 blocks on a 10 MB one.
MAX_EDIT_WORK = 20_000_000

# Straight quotes, then typographic ones (curly double and single, low-9, guillemets) as escapes to keep ruff quiet.
_QUOTES = r"'\"\u201c\u201d\u201e\u2018\u2019\u201a\u00ab\u00bb"
# What surrounds an lgtm (or another verdict phrase, `is_only`): the opening fence is tried before single backticks
# so that its language tag goes with it (but not a tag that is the phrase, as in ```lgtm\n```, which is the lgtm
# itself). The two patterns never fail, so the engine never backtracks across repetitions, and the tail is matched
# on the reversed reply because a `...*\Z` search would rescan from every start position.
_LGTM_TAIL = re.compile(rf"[\s`*.!{_QUOTES}]*")

# Marker lines are matched one line at a time with fullmatch, which keeps parsing linear in the size of the reply.
_SEARCH_LINE = re.compile(r"<{5,9} ?SEARCH\s*")
_DIVIDER_LINE = re.compile(r"={5,9}\s*")
_REPLACE_LINE = re.compile(r">{5,9} ?REPLACE\s*")
_SEARCH = "'<<<<<<< SEARCH'"
_DIVIDER = "'======='"
_REPLACE = "'>>>>>>> REPLACE'"

_EXCERPT_CHARS = 80


class EditError(AdapterCriticError, ValueError):
    """The reply is not a valid review; str(exc) is a short reason suitable to show the adapter model as feedback
    and to report to users as `adapter_rejection_reason` (e.g. "edit block 2: SEARCH text not found in the draft:
    '...'")."""


@dataclass(frozen=True, slots=True)
class Edit:
    """One SEARCH/REPLACE block: replace the first occurrence of `search` in the text with `replace`."""

    search: str
    replace: str


def is_lgtm(reply: str) -> bool:
    """Whether the reply approves the draft: `lgtm` in any case, once surrounding whitespace, code fences, quotes,
    backticks, asterisks and trailing `.`/`!` are stripped (`**LGTM**`, `"lgtm."`, a fenced lgtm)."""
    return is_only(reply, "lgtm")


def is_only(reply: str, phrase: str) -> bool:
    """Whether the reply is `phrase` and nothing else, read as `is_lgtm` reads `lgtm`: in any case, its whitespace
    runs alike, once surrounding whitespace, code fences, quotes, backticks, asterisks and a trailing `.`/`!` are
    stripped."""
    head = _head(phrase).match(reply)
    tail = _LGTM_TAIL.match(reply[::-1])
    start = head.end() if head else 0
    end = len(reply) - (tail.end() if tail else 0)
    if not start < end <= start + 2 * len(phrase) + 64:  # a long reply is not the phrase: never split it
        return False
    return " ".join(reply[start:end].split()).casefold() == " ".join(phrase.split()).casefold()


@functools.lru_cache(maxsize=64)
def _head(phrase: str) -> re.Pattern[str]:
    return re.compile(rf"(?:```(?!(?i:{re.escape(phrase)}))[^`\n]*\n|[\s`*{_QUOTES}])*")


def parse_edits(reply: str) -> list[Edit]:
    """The reply's edit blocks in order; raises `EditError` if it has none, or one is empty or malformed."""
    edits: list[Edit] = []
    search: list[str] | None = None  # lines of the open block's SEARCH part, None outside a block
    replace: list[str] | None = None  # lines of its REPLACE part, None until its divider
    for line in reply.replace("\r\n", "\n").split("\n"):
        block = f"edit block {len(edits) + 1}"
        if search is None:
            if _SEARCH_LINE.fullmatch(line):
                search = []
            elif _REPLACE_LINE.fullmatch(line):
                raise EditError(f"{block}: a {_REPLACE} line without a {_SEARCH} line before it")
            # Anything else outside a block is prose or a code fence.  A stray divider is ignored too: a line of `=`
            # is an ordinary Markdown heading underline.
        elif replace is None:
            if _DIVIDER_LINE.fullmatch(line):
                replace = []
            elif _SEARCH_LINE.fullmatch(line):
                raise EditError(f"{block}: a second {_SEARCH} line before its {_DIVIDER} line")
            elif _REPLACE_LINE.fullmatch(line):
                raise EditError(f"{block}: a {_REPLACE} line before its {_DIVIDER} line")
            else:
                search.append(line)
        elif _REPLACE_LINE.fullmatch(line):
            edit = Edit("\n".join(search), "\n".join(replace))
            if not edit.search.strip():
                raise EditError(f"{block}: the SEARCH text is empty")
            _check_size(edit, len(edits) + 1)
            edits.append(edit)
            if len(edits) > MAX_EDIT_BLOCKS:
                raise EditError(f"more than {MAX_EDIT_BLOCKS} edit blocks; make fewer, larger edits")
            search = replace = None
        elif _SEARCH_LINE.fullmatch(line):
            raise EditError(f"{block} never ends: no {_REPLACE} line before the next {_SEARCH} line")
        else:
            # A divider here is replacement text: only the first one after SEARCH separates the two parts.
            replace.append(line)
    if search is not None:
        missing = _DIVIDER if replace is None else _REPLACE
        raise EditError(f"edit block {len(edits) + 1} never ends: no {missing} line")
    if not edits:
        raise EditError(
            f"the reply is neither 'lgtm' nor SEARCH/REPLACE edit blocks ({_SEARCH} ... {_DIVIDER} ... {_REPLACE})"
        )
    return edits


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """`text` with the edits applied in order, each to the result of the previous one; raises `EditError` naming the
    first edit (1-based) whose SEARCH text is empty or not found."""
    if len(edits) > MAX_EDIT_BLOCKS:
        raise EditError(f"more than {MAX_EDIT_BLOCKS} edit blocks; make fewer, larger edits")
    if len(edits) * (len(text) + sum(len(edit.replace) for edit in edits)) > MAX_EDIT_WORK:
        raise EditError(f"{len(edits)} edit blocks are too many for a draft this long; make fewer, larger edits")
    for number, edit in enumerate(edits, start=1):
        _check_size(edit, number)
        text = _apply_edit(text, edit, number)
    return text


def _check_size(edit: Edit, number: int) -> None:
    for part, value in (("SEARCH", edit.search), ("REPLACE", edit.replace)):
        if len(value) > MAX_EDIT_BLOCK_CHARS:
            raise EditError(f"edit block {number}: the {part} text is longer than {MAX_EDIT_BLOCK_CHARS} characters")


def review(draft: str, reply: str) -> str:
    """The final text for a reviewer reply: the draft itself for lgtm, else the draft with the edits applied; raises
    `EditError`."""
    if is_lgtm(reply):
        return draft
    return apply_edits(draft, parse_edits(reply))


def _apply_edit(text: str, edit: Edit, number: int) -> str:
    search = edit.search.replace("\r\n", "\n")
    if not search.strip():
        raise EditError(f"edit block {number}: the SEARCH text is empty")
    replace = edit.replace.replace("\r\n", "\n")
    if "\r\n" in text:
        search = search.replace("\n", "\r\n")
        replace = replace.replace("\n", "\r\n")
    start = text.find(search)
    if start >= 0:
        end = start + len(search)
    else:
        span = _find_lines(text, edit.search.replace("\r\n", "\n"))
        if span is None:
            raise EditError(f"edit block {number}: SEARCH text not found in the draft: {_excerpt(edit.search)}")
        start, end = span
    if not replace:
        start, end = _with_line_break(text, start, end)
    return text[:start] + replace + text[end:]


def _find_lines(text: str, search: str) -> tuple[int, int] | None:
    """The span of the first run of whole lines of `text` equal to the lines of `search` when trailing whitespace is
    ignored, or None.  The span ends before the run's last line break, unless `search` ends with a line break."""
    wanted = search.split("\n")
    # A SEARCH ending in a line break means "these lines, with their line break", not "and then a blank line".
    through_break = len(wanted) > 1 and not wanted[-1].strip()
    if through_break:
        wanted.pop()
    lines = text.split("\n")
    # With every line wrapped in line breaks, one substring search finds whole-line runs only, in linear time where
    # comparing line lists at each position would be quadratic.
    haystack = "\n" + "\n".join(line.rstrip() for line in lines) + "\n"
    needle = "\n" + "\n".join(line.rstrip() for line in wanted) + "\n"
    found = haystack.find(needle)
    if found < 0:
        return None
    first = haystack.count("\n", 0, found)  # the breaks before `found` are the lines before the run
    last = first + len(wanted) - 1
    start = sum(len(line) + 1 for line in lines[:first])
    end = start + sum(len(line) + 1 for line in lines[first:last]) + len(lines[last])
    if last < len(lines) - 1:  # the run's last line has a line break after it
        if through_break:
            end += 1
        elif lines[last].endswith("\r"):
            end -= 1  # the CR belongs to the CRLF that stays after the run
    return start, end


def _with_line_break(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen a span of whole lines that is about to be deleted by one line break, so the lines vanish instead of
    leaving a blank line; any other span is returned as it is."""
    if start == end or (start > 0 and text[start - 1] != "\n") or text.endswith("\n", start, end):
        return start, end
    for line_break in ("\n", "\r\n"):
        if text.startswith(line_break, end):
            return start, end + len(line_break)
    if end < len(text):  # the span ends mid-line
        return start, end
    if text.endswith("\r\n", 0, start):
        return start - 2, end
    return max(start - 1, 0), end


def _excerpt(text: str) -> str:
    if len(text) <= _EXCERPT_CHARS:
        return repr(text)
    return repr(text[:_EXCERPT_CHARS]) + "..."
