"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The store's tables (one definition for SQLite and PostgreSQL, as SQLAlchemy Core) and its versioned upgrades.

`schema_version` holds the version a store is at; `upgrade` applies every later step in order, in one transaction
(PostgreSQL: under an advisory lock, so workers starting together upgrade once). A step is a function of a
connection; add one to `STEPS` to change the schema, never edit a released one.

JSON values (usage, attempts, messages, …) are text columns: portable, and read whole, never queried into.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    false,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection

from ..errors import StoreError

metadata = MetaData()

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(128), primary_key=True),
    Column("request_id", String(128), nullable=False),
    Column("served_model", String(256), nullable=False),
    Column("mode", String(64), nullable=False),
    Column("stream", Boolean, nullable=False),
    Column("status", String(16), nullable=False),
    Column("degraded", Boolean, nullable=False),
    Column("started_at", Double, nullable=False),  # Unix seconds
    Column("finished_at", Double),
    Column("duration_ms", Double),
    Column("capture", String(16), nullable=False),
    Column("instance", String(64), nullable=False),  # the server process that runs it (`instances`)
    Column("usage", Text),  # JSON: Tokens
    Column("error", Text),  # JSON: StoredError
    Column("request", Text),  # JSON: StoredRequest
    # intermediate, answer and from_stages: how runs ended before schema version 4 (`record` since).
    Column("intermediate", Text),  # JSON: dict[str, str | None]
    Column("answer", Text),  # JSON: StoredAnswer
    # JSON: FromStages — which of `answer`'s content and `intermediate`'s values are a stage's output, kept only in
    # that stage's row (their value here is null); NULL when none is (schema version 3).
    Column("from_stages", Text),
    # JSON: RunEnd — what the run's end recorded besides the columns a list shows: its intermediate values, answer
    # and the stages written with it (schema version 4); NULL while the run is going, and in runs ended before.
    Column("record", Text),
    # What the run cost (schema version 5), all NULL when the server had no prices: the currency, the total (NULL
    # when a stage's cost is unknown), the known stages' sum (what `min_cost` filters on) and, JSON, the stages
    # whose cost is unknown (NULL: none).
    Column("cost_currency", String(16)),
    Column("cost_total", Double),
    Column("cost_known", Double),
    Column("cost_unknown", Text),
    # The name of the inbound key that started the run (`[[auth.keys]]`), never the key; NULL without one (version 7).
    Column("key_name", String(128)),
    # A child run — a stage of another run that ran this served model's workflow — names that run and stage
    # (schema version 8); NULL for a client's own run.
    Column("parent_run_id", String(128)),
    Column("parent_stage", String(128)),
    # A cache hit — answered from the exact-match cache, without an upstream call — names the run whose answer it
    # gave again (schema version 9); NULL for every other run.
    Column("cached_from", String(128)),
    Index("runs_started", "started_at", "run_id"),
    Index("runs_key_started", "key_name", "started_at"),
    Index("runs_request_id", "request_id"),
    Index("runs_status", "status"),
    Index("runs_parent", "parent_run_id"),
)

stages = Table(
    "stages",
    metadata,
    Column("run_id", String(128), primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("stage", String(128), nullable=False),
    Column("status", String(16), nullable=False),
    Column("target_model", String(256), nullable=False),
    Column("target_host", String(256), nullable=False),
    Column("started_offset_ms", Double, nullable=False),
    Column("elapsed_ms", Double, nullable=False),
    Column("attempts", Text, nullable=False),  # JSON: list[StoredAttempt]
    Column("usage", Text, nullable=False),  # JSON: the stage's usage
    Column("usage_reported", Boolean, nullable=False),
    Column("messages", Text),  # JSON, capture `full` only
    Column("output", Text),  # capture `full` only
    Column("error", Text),  # JSON: AttemptError
    # The stage sent the client's own messages (a run's first stage): they are kept once, in `runs.request`, and
    # `messages` is NULL (schema version 2).
    Column("request_messages", Boolean, nullable=False, server_default=false()),
    # What the call cost (schema version 5): NULL with a currency when unknown, both NULL when the server had no
    # prices.
    Column("cost", Double),
    Column("cost_currency", String(16)),
    # The child run this stage call was, when it ran another served model's workflow (schema version 8).
    Column("child_run_id", String(128)),
)

# The server processes writing to the store: a run left `running` by a process that is gone is `interrupted`.
instances = Table(
    "instances",
    metadata,
    Column("instance_id", String(64), primary_key=True),
    Column("hostname", String(256), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("heartbeat_at", Double, nullable=False),
    # `<pid namespace>/<start time>` of the process (schema version 6): a pid reused by a later process — a
    # restarted container's server is pid 1 again — is not the instance's, and a process in another pid namespace
    # (a container sharing the host's name) is not looked up by pid. NULL where /proc does not say.
    Column("process", String(128)),
)

# The exact-match cache's answers, when it keeps them in the store (docs/guides/cache.md; schema version 9): one row
# per key, read by its primary key. `entry` is JSON (`cache.entry.CachedRun`); a row is served until `expires_at`
# (Unix seconds), and deleted by the upkeep after.
cache = Table(
    "cache",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("run_id", String(128), nullable=False),
    Column("served_model", String(256), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("expires_at", Double, nullable=False),
    Column("entry", Text, nullable=False),
    Index("cache_expires", "expires_at"),
)

# Feedback on runs (docs/guides/feedback.md; schema version 10): any number of entries per run, each with when it was
# given and by which named key. `score` is -1 to 1; `stage` and `verdict` (`accept` | `reject`) judge one stage's
# output; `corrected_answer` is the answer the run should have given. Deleted with its run.
feedback = Table(
    "feedback",
    metadata,
    Column("feedback_id", String(64), primary_key=True),
    Column("run_id", String(128), nullable=False),
    Column("created_at", Double, nullable=False),  # Unix seconds
    Column("key_name", String(128)),  # the named key that gave it (never the key); NULL without one
    Column("via", String(16), nullable=False),  # `api` (the runs API, the viewer) or `cli`
    Column("score", Double, nullable=False),
    Column("label", String(128)),
    Column("comment", Text),
    Column("stage", String(128)),
    Column("stage_index", Integer),
    Column("verdict", String(16)),
    Column("corrected_answer", Text),
    Index("feedback_run", "run_id", "created_at"),
)

# Lessons for a served model's reviewers (docs/guides/learning.md; schema version 11): numbered versions, each a JSON
# list of short texts distilled from feedback; `status` is `candidate` (learnt, not in use), `active` (the one in
# use: at most one per served model), `retired` (active before) or `rejected` (its eval said it was worse). `note`
# is what its eval found, as JSON.
lessons = Table(
    "lessons",
    metadata,
    Column("served_model", String(256), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("status", String(16), nullable=False),
    Column("created_at", Double, nullable=False),  # Unix seconds
    Column("lessons", Text, nullable=False),
    Column("parent", Integer),  # the version active when it was learnt (NULL: none was)
    Column("note", Text),
)

# Choosing per request (docs/guides/routing.md; schema version 12): an `auto` model's policies as `route fit` stored
# them (the newest is the one in use), and each shadow evaluation of a live run (`outcome` is the candidate's: `won`,
# `tied`, `lost`, or `failed`), with what both answers took and cost.
route_policies = Table(
    "route_policies",
    metadata,
    Column("served_model", String(256), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("created_at", Double, nullable=False),
    Column("policy", Text, nullable=False),  # JSON: routing.policy.Policy
)
shadows = Table(
    "shadows",
    metadata,
    Column("shadow_run_id", String(128), primary_key=True),
    Column("live_run_id", String(128), nullable=False, index=True),
    Column("served_model", String(256), nullable=False),
    Column("candidate", String(256), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("key_name", String(128)),  # the live run's (its tenancy is the live run's)
    Column("request_class", String(128)),
    Column("outcome", String(16), nullable=False),
    Column("detail", Text, nullable=False),  # JSON: store.shadows.ShadowDetail
)

schema_version = Table("schema_version", metadata, Column("version", Integer, nullable=False))


def _v1(conn: Connection) -> None:
    for table in (runs, stages, instances, cache):
        table.create(conn, checkfirst=True)  # today's definitions: a new store has the later versions' columns already


def _v2(conn: Connection) -> None:
    """`stages.request_messages`: a stage that sent the client's messages no longer stores a second copy."""
    _add_column(conn, "stages", "request_messages", "BOOLEAN NOT NULL DEFAULT false")


def _v3(conn: Connection) -> None:
    """`runs.from_stages`: an answer or intermediate text that is a stage's output is no longer stored again."""
    _add_column(conn, "runs", "from_stages", "TEXT")


def _v4(conn: Connection) -> None:
    """`runs.record`: a run's end is one JSON document, with the stages written in its batch (not rows of `stages`)."""
    _add_column(conn, "runs", "record", "TEXT")


def _v5(conn: Connection) -> None:
    """What runs and stage calls cost: `runs.cost_*`, `stages.cost` and `stages.cost_currency`."""
    for column, definition in (
        ("cost_currency", "VARCHAR(16)"),
        ("cost_total", "DOUBLE PRECISION"),
        ("cost_known", "DOUBLE PRECISION"),
        ("cost_unknown", "TEXT"),
    ):
        _add_column(conn, "runs", column, definition)
    _add_column(conn, "stages", "cost", "DOUBLE PRECISION")
    _add_column(conn, "stages", "cost_currency", "VARCHAR(16)")


def _v6(conn: Connection) -> None:
    """`instances.process`: which process an instance is, beyond its pid (a pid can be reused)."""
    _add_column(conn, "instances", "process", "VARCHAR(128)")


def _v7(conn: Connection) -> None:
    """`runs.key_name`: which named key started a run, for its usage (`keys usage`, `GET /keys/{name}/usage`)."""
    _add_column(conn, "runs", "key_name", "VARCHAR(128)")
    conn.execute(text("CREATE INDEX IF NOT EXISTS runs_key_started ON runs (key_name, started_at)"))


def _v8(conn: Connection) -> None:
    """Child runs: `runs.parent_run_id` and `runs.parent_stage` (indexed by parent), `stages.child_run_id`."""
    _add_column(conn, "runs", "parent_run_id", "VARCHAR(128)")
    _add_column(conn, "runs", "parent_stage", "VARCHAR(128)")
    _add_column(conn, "stages", "child_run_id", "VARCHAR(128)")
    conn.execute(text("CREATE INDEX IF NOT EXISTS runs_parent ON runs (parent_run_id)"))


def _v9(conn: Connection) -> None:
    """The exact-match cache: its table `cache`, and `runs.cached_from` (a hit names the run it answered from)."""
    _add_column(conn, "runs", "cached_from", "VARCHAR(128)")
    cache.create(conn, checkfirst=True)


def _v10(conn: Connection) -> None:
    """Feedback on runs: the table `feedback`."""
    feedback.create(conn, checkfirst=True)


def _v11(conn: Connection) -> None:
    """Lessons for reviewers: the table `lessons`."""
    lessons.create(conn, checkfirst=True)


def _v12(conn: Connection) -> None:
    """Choosing per request: the tables `route_policies` and `shadows`."""
    route_policies.create(conn, checkfirst=True)
    shadows.create(conn, checkfirst=True)


def _add_column(conn: Connection, table: str, column: str, definition: str) -> None:
    """Add `column` to `table` unless it is there (`_v1` makes a new store with today's columns already)."""
    if column not in {found["name"] for found in inspect(conn).get_columns(table)}:
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {definition}"))


STEPS: tuple[Callable[[Connection], None], ...] = (_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9, _v10, _v11, _v12)
VERSION = len(STEPS)


class SchemaTooNew(StoreError, RuntimeError):
    """The store was written by a newer version of adapter_critic."""


def upgrade(conn: Connection) -> int:
    """Bring the store's schema to `VERSION` (inside the caller's transaction); returns the version it was at."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(7305712201)"))  # any constant: one upgrader at a time
    schema_version.create(conn, checkfirst=True)
    found = conn.execute(select(schema_version.c.version)).scalar()
    current = int(found) if found is not None else 0
    if current > VERSION:
        raise SchemaTooNew(
            f"the run store is at schema version {current}, newer than this adapter_critic's ({VERSION}); "
            "upgrade adapter_critic or point store.url at another database"
        )
    for step in STEPS[current:]:
        step(conn)
    if found is None:
        conn.execute(schema_version.insert().values(version=VERSION))
    elif current != VERSION:
        conn.execute(schema_version.update().values(version=VERSION))
    return current
