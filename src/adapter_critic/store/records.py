"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What the run store holds and the runs API answers: one definition of each shape, as msgspec Structs.

`RunSummary` is a run as `GET /runs` lists it; `RunDetail` is the whole record of `GET /runs/{id}`, with its
`StoredStage`s in order. Their JSON encoding is the API's JSON (field names, `null`s and all), so readers in
Python (`RunStore`) and over HTTP see the same thing. `RunQuery` is a list's filters, `RunPage` one page of it.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import math
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from ..errors import StoreError

ShadowOutcome = Literal["won", "tied", "lost", "failed"]

StoredStatus = Literal["running", "ok", "degraded", "error", "cancelled", "interrupted"]
STATUSES: tuple[str, ...] = ("running", "ok", "degraded", "error", "cancelled", "interrupted")
Capture = Literal["full", "metadata"]


class Tokens(msgspec.Struct):
    """Token counts (details, where an upstream gave them, are in the stage's `usage` as it reported them)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class StoredError(msgspec.Struct):
    """An error as the client got it: the HTTP status and the error envelope's fields."""

    status: int
    type: str
    message: str
    param: str | None = None
    code: str | None = None


class AttemptError(msgspec.Struct):
    """Why one attempt of a stage call failed: `kind` (`status`, `timeout`, `connect`, `invalid`, …), the upstream's
    HTTP status when it answered, and the message (secrets redacted)."""

    kind: str
    message: str
    status: int | None = None


class StoredAttempt(msgspec.Struct):
    """One attempt of a stage call: the target asked (model and host — never a key) and, if it failed, why."""

    target_model: str
    target_host: str
    error: AttemptError | None = None


class StageCost(msgspec.Struct):
    """What one stage call cost, in `currency`; `amount` is null when it is unknown (its model has no price, or its
    upstream did not say what it used: docs/guides/cost.md)."""

    currency: str
    amount: float | None


class RunCost(msgspec.Struct):
    """What a run cost, in `currency`: `total` (null when any stage's cost is unknown), `total_known` (the sum of the
    stages whose cost is known: a lower bound of the real total when `unknown_stages` names any)."""

    currency: str
    total: float | None
    total_known: float
    unknown_stages: list[str] = []


class StoredStage(msgspec.Struct):
    """One finished stage call, in the order the run made them (`index` from 0).

    `started_offset_ms` is when the call started, in milliseconds after the run started, and `elapsed_ms` how long
    it took (retries and fallbacks included): together they draw a timeline. `messages` (what the stage sent) and
    `output` (its answer text) are present only under capture `full`."""

    index: int
    stage: str
    status: Literal["ok", "error", "cancelled"]  # cancelled: the run was cancelled (the client left) during the call
    target_model: str
    target_host: str
    started_offset_ms: float
    elapsed_ms: float
    attempts: list[StoredAttempt]
    usage: dict[str, Any]  # the stage's usage as summed over its attempts (details included)
    usage_reported: bool
    messages: list[Any] | None = None
    output: str | None = None
    error: AttemptError | None = None
    cost: StageCost | None = None  # null when the server had no prices
    child_run_id: str | None = None  # the child run this call was, when it ran another served model's workflow


class RunSummary(msgspec.Struct):
    """A run as `GET /runs` lists it. Times are ISO 8601 in UTC; `finished_at`, `duration_ms`, `usage`, `cost` are
    null while the run is `running` (and for an `interrupted` one); `cost` is null too when the server had no
    prices."""

    id: str  # the run id: `adapter_critic.run_id` of its response
    request_id: str  # the response's `x-request-id` (the client's own, when it sent one; else the run id)
    served_model: str
    mode: str
    stream: bool
    status: StoredStatus
    degraded: bool
    started_at: str
    finished_at: str | None = None
    duration_ms: float | None = None
    usage: Tokens | None = None
    error: StoredError | None = None
    cost: RunCost | None = None
    # A child run (a stage of another run that ran this served model's workflow): that run's id and the stage.
    parent_run_id: str | None = None
    parent_stage: str | None = None
    # A cache hit (answered from the exact-match cache, without an upstream call): the run whose answer it gave.
    cached_from: str | None = None
    # The name of the named key (`[[auth.keys]]`) that made the run — never the key; null without one.
    key_name: str | None = None
    feedback_count: int = 0  # how many feedback entries the run has (`POST /runs/{id}/feedback`)
    object: str = "run"


class StoredAnswer(msgspec.Struct):
    """The final answer the client got (`content` and `tool_calls` under capture `full` only)."""

    finish_reason: str | None = None
    content: str | None = None
    tool_calls: list[Any] | None = None


class FromStages(msgspec.Struct, omit_defaults=True):
    """A run's texts stored once, in a stage's row (`runs.from_stages`): the index of the stage whose output the
    answer's content is, and the same per `intermediate` key. Never part of an API answer: reads fill the texts in."""

    answer: int | None = None
    intermediate: dict[str, int] = {}


class RunEnd(msgspec.Struct, omit_defaults=True):
    """A run's end as the store keeps it, besides the columns a list shows (status, times, usage, error): one JSON
    document, `runs.record` (schema version 4), read whole.

    Its answer and intermediate values, and the stages whose records were written with it (a run's stages that
    ended in an earlier batch are rows of `stages`). An answer or intermediate text that is one of those stages'
    outputs is kept once, in the stage (`from_stages`); `request_messages` names the stages that sent the client's
    own messages, kept once in the run's request. Never an API answer: reads fill the texts in."""

    answer: StoredAnswer
    intermediate: dict[str, Any] = {}
    from_stages: FromStages | None = None
    stages: list[StoredStage] = []
    request_messages: list[int] = []


class StoredRequest(msgspec.Struct):
    """The client's request as the run saw it: its options (every field but `model` and `messages`, e.g.
    `temperature`, `tools`, `x_adapter_critic`) and, under capture `full`, its `messages`."""

    options: dict[str, Any]
    messages: list[Any] | None = None


class Feedback(msgspec.Struct, kw_only=True):
    """One feedback entry on a run (`POST /runs/{id}/feedback`, `adapter-critic runs feedback`): `score` from -1 (bad)
    to 1 (good) — a thumbs up is 1, down -1 —, an optional `label` and `comment`, a `verdict` (`accept` | `reject`)
    on the output of the stage `stage` (its `stage_index`), and the answer the run should have given
    (`corrected_answer`). `key_name`: the named key that gave it (null without one); `via`: `api` or `cli`."""

    id: str
    run_id: str
    created_at: str  # ISO 8601 UTC
    score: float
    label: str | None = None
    comment: str | None = None
    stage: str | None = None
    stage_index: int | None = None
    verdict: Literal["accept", "reject"] | None = None
    corrected_answer: str | None = None
    key_name: str | None = None
    via: str = "api"
    object: str = "run.feedback"


class Side(msgspec.Struct, kw_only=True):
    """What one side of a shadow evaluation took: its run, tokens, cost (None: no prices) and time."""

    model: str
    run_id: str | None = None
    tokens: int = 0
    cost: float | None = None
    ms: float | None = None


class ShadowDetail(msgspec.Struct, kw_only=True):
    """A shadow evaluation as stored: both sides, the judge's votes (as shown: live first, then shadow first) and
    runs, and why it failed when it did."""

    live: Side
    shadow: Side
    judge: Side
    votes: list[str | None] = []  # `live`, `shadow`, `tie`, or None (no verdict), per order
    judge_runs: list[str] = []
    currency: str | None = None  # the costs' (None: no prices)
    error: str | None = None


class ShadowRow(msgspec.Struct, kw_only=True):
    """One shadow evaluation of a live run (docs/guides/routing.md#shadow-evaluation): `outcome` is the
    candidate's (`won`, `tied`, `lost`, `failed`)."""

    shadow_run_id: str
    live_run_id: str
    served_model: str
    candidate: str
    created_at: float
    key_name: str | None
    request_class: str | None
    outcome: ShadowOutcome
    detail: ShadowDetail


class RunDetail(RunSummary, kw_only=True):
    """The whole record of one run (`GET /runs/{id}`): the summary's fields and what a viewer draws from."""

    capture: Capture = "full"
    request: StoredRequest | None = None
    intermediate: dict[str, Any] = {}  # the extension's `intermediate`: text or JSON data (null under metadata)
    answer: StoredAnswer | None = None
    stages: list[StoredStage] = []
    children: list[RunSummary] = []  # its child runs (stages run by other served models), in the order they started
    feedback: list[Feedback] = []  # its feedback entries, oldest first
    shadows: list[ShadowRow] = []  # its shadow evaluations (docs/guides/routing.md#shadow-evaluation)


class RunPage(msgspec.Struct):
    """One page of `GET /runs`, newest first; pass `next_cursor` as `cursor` for the next (null: the last page)."""

    data: list[RunSummary]
    next_cursor: str | None = None
    has_more: bool = False
    object: str = "list"


class RunQuery(msgspec.Struct, kw_only=True):
    """The filters of a list of runs (every one optional; `since`/`until` are Unix seconds, `until` exclusive;
    `min_cost`: runs whose known cost is at least this, in the store's currency — a run with stages of unknown cost
    counts the known part, so it is listed once that alone reaches `min_cost`; `cache_hit`: cache hits, or the
    others)."""

    served_model: str | None = None
    mode: str | None = None
    status: StoredStatus | None = None
    degraded: bool | None = None
    since: float | None = None
    until: float | None = None
    request_id: str | None = None
    min_cost: float | None = None
    parent_run_id: str | None = None
    cache_hit: bool | None = None  # true: only cache hits (`cached_from` set); false: only runs that were not
    key_name: str | None = None  # only the runs this named key made
    has_feedback: bool | None = None  # true: only runs with feedback; false: only runs without


@dataclass(frozen=True, slots=True)
class RunsOf:
    """Whose runs a reader sees (the runs API's caller: `http.runs.runs_seen_by`): every run (`every`), else only
    the runs the named key `key_name` made — None: only the runs no named key made. A run it may not see is not
    found, and a link to one (a parent, a child, the run a cache hit answered from) is null."""

    every: bool = True
    key_name: str | None = None


EVERY_RUN = RunsOf()


def runs_of_key(key_name: str | None) -> RunsOf:
    """Only the runs of the named key `key_name` (None: the runs no named key made)."""
    return RunsOf(every=False, key_name=key_name)


# -- cursors and times ----------------------------------------------------------------------------------------------


class BadCursor(StoreError, ValueError):
    """A `cursor` that this store did not hand out."""


def encode_cursor(started_at: float, run_id: str) -> str:
    """The opaque cursor after the run that started at `started_at` with id `run_id` (the page's last)."""
    return base64.urlsafe_b64encode(msgspec.json.encode([started_at, run_id])).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        started_at, run_id = msgspec.json.decode(raw, type=tuple[float, str])
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise BadCursor(cursor) from None
    return started_at, run_id


def iso(seconds: float) -> str:
    """Unix seconds as ISO 8601 in UTC with milliseconds: `2026-11-25T08:44:08.123Z`."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_time(text: str) -> float:
    """Unix seconds from `text`: a number of seconds, or ISO 8601 (a date, or a time with an offset or `Z`; UTC
    when it has none). Raises ValueError."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise ValueError(f"not a time: {text!r}")
        return seconds
    moment = datetime.datetime.fromisoformat(text.strip().replace("z", "Z"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()
