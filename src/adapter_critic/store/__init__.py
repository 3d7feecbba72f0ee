"""The run store: every run recorded, off the hot path, in SQLite (embedded) or PostgreSQL (shared).

Reading a store (what the runs API, the command line and a trace viewer use)::

    from adapter_critic.store import RunQuery, open_store

    store = await open_store("sqlite:///path/runs.sqlite3")   # or "postgresql://user@host/db"
    async with store:                                          # closes the store on exit
        page = await store.list_runs(RunQuery(mode="critic", degraded=True), limit=50)
        for run in page.data: ...                              # RunSummary, newest first
        more = await store.list_runs(RunQuery(mode="critic", degraded=True), cursor=page.next_cursor)
        run = await store.get_run(page.data[0].id)             # RunDetail (stages in order) or None
        async for kind, item in store.follow(run.id): ...      # ("run", RunSummary), ("stage", StoredStage)…,
                                                               # ("end", RunSummary) once it is no longer running

`open_store(url)` upgrades the schema to this version's (it is versioned; older stores are upgraded in place) and
never writes anything else; `url` is `sqlite:///relative.db`, `sqlite:////absolute/path.db` or a
`postgresql://` URL (`postgresql+asyncpg://` is the same). `RunStore.list_runs` raises `BadCursor` for a cursor it
did not hand out. The shapes are msgspec Structs in `store.records` (`msgspec.json.encode` gives the API's JSON).

The runs API (under the mount: `/v1/runs` standalone; the same inbound auth as the chat endpoint):

- `GET /runs?served_model=&mode=&status=&degraded=true|false&since=&until=&request_id=&min_cost=&limit=50&cursor=` →
  `{"object": "list", "data": [RunSummary…], "next_cursor": str | null, "has_more": bool}`, newest first
  (`key_name=`: the runs of one named key).
  `since`/`until`: ISO 8601 (UTC unless it says) or Unix seconds; `min_cost`: runs whose known cost is at least
  this (docs/guides/cost.md); `limit` 1 to 1000 (default 50).
- `GET /runs/{id}` → `RunDetail`: every `RunSummary` field plus `capture`, `request`, `intermediate`, `answer`,
  `stages` (in order).
- `GET /runs/{id}/events` → `text/event-stream`: `event: run` (the run as it is now), then `event: stage` for each
  finished stage in order (`id:` its index; `data:` a StoredStage), and, for a run still going, each further stage
  as it ends; finally `event: end` (the RunSummary as it ended) and the stream closes. `: keep-alive` comments
  while nothing happens.
- `POST /runs/{id}/feedback` with `{"score": -1..1, "label", "comment", "stage", "verdict": "accept" | "reject",
  "corrected_answer"}` → 201 and the `Feedback` entry as kept (docs/guides/feedback.md); a run's `feedback` lists
  its entries, a summary's `feedback_count` counts them, `has_feedback=true|false` filters on them.
- A bad filter or cursor is a 400, an unknown run a 404, both in the OpenAI error envelope.
- Under inbound auth with named keys, a key that is not `admin` sees only its own runs (another key's run is a 404
  like an unknown one); `RunStore`'s reads take `seen_by` (`store.records.RunsOf`) to do the same.

RunSummary: `id` (the run id, `adapter_critic.run_id`), `object: "run"`, `request_id` (the response's
`x-request-id`), `served_model`, `mode`, `stream`, `status` (`running | ok | degraded | error | cancelled |
interrupted`), `degraded`, `started_at`, `finished_at` (ISO 8601 UTC), `duration_ms`, `usage` (`prompt_tokens`,
`completion_tokens`, `total_tokens`), `error` (`status`, `type`, `message`, `param`, `code`: the error envelope the
client got), `cost` (`currency`, `total`, `total_known`, `unknown_stages`: with prices configured), `key_name` (the
named key that made it) — null where not known yet.
RunDetail adds: `capture` (`full | metadata`), `request` (`options`: every request field but `model` and
`messages`; `messages` under `full`), `intermediate` (the extension's; values null under `metadata`), `answer`
(`finish_reason`, and `content`, `tool_calls` under `full`), `stages`.
StoredStage: `index`, `stage`, `status` (`ok | error | cancelled`), `target_model`, `target_host` (never a key),
`started_offset_ms` (after the run's start), `elapsed_ms`, `attempts` (`target_model`, `target_host`,
`error`: `kind`, `message`, `status`), `usage` (as the upstream reported it, summed over attempts),
`usage_reported`, `messages` and `output` (under `full`), `error`, `cost` (`currency`, `amount`: with prices
configured).

Writing is the server's: a `RunRecorder` (a run-event subscriber per run) queues records into a bounded in-memory
queue that a background task flushes in batches (`RunStore.start` / `RunStore.aclose`, which drains it), through
the store's writer process (`store.writer`, docs/guides/store.md#the-writer-process) or in the server's process. Secrets
are redacted before anything is written, whatever the capture level. A server's store is `service.store` (None when
not recording); `store.queue_depth` (records waiting) and `store.dropped` (records dropped because the queue was
full, a running count) are plain attributes for metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .records import (
    BadCursor,
    RunCost,
    RunDetail,
    RunPage,
    RunQuery,
    RunSummary,
    StageCost,
    StoredAnswer,
    StoredAttempt,
    StoredError,
    StoredRequest,
    StoredStage,
)

if TYPE_CHECKING:
    from .runstore import RunStore


async def open_store(url: str) -> RunStore:
    """The store at `url`, its schema upgraded, ready to read (`async with` it, or `await store.aclose()`).

    Needs the `store` extra (SQLite) or the `postgres` extra (PostgreSQL)."""
    from .runstore import open_store as open_

    return await open_(url)


def __getattr__(name: str) -> Any:
    if name == "RunStore":  # imported on use: the database libraries are an extra
        from .runstore import RunStore

        return RunStore
    raise AttributeError(name)


__all__ = [
    "BadCursor",
    "RunCost",
    "RunDetail",
    "RunPage",
    "RunQuery",
    "RunStore",
    "RunSummary",
    "StageCost",
    "StoredAnswer",
    "StoredAttempt",
    "StoredError",
    "StoredRequest",
    "StoredStage",
    "open_store",
]
