"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`POST /runs/{id}/feedback` (docs/guides/feedback.md): a feedback entry on a run the caller may see, written to the
run store and answered 201 with the entry as stored. A run the caller may not see is a 404 like an unknown one; a
body that is not feedback a 400 naming the field, in the OpenAI error envelope.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
from starlette.types import Receive, Scope, Send

from ..errors import Overloaded, RequestError
from ..store.feedback import FeedbackInvalid, FeedbackNotKept, decode_feedback, given, verdict_label
from ..store.records import RunsOf
from .auth import CALLER
from .body import read_body
from .jsonanswer import JSONAnswer

if TYPE_CHECKING:
    from ..store.runstore import RunStore

MAX_BODY = 1_048_576  # a feedback body's bytes: a comment and a corrected answer of 100,000 characters each fit
# Told of each entry kept: its run's served model and the metric's verdict (`store.feedback.verdict_label`).
OnFeedback = Callable[[str, str], None]
_encoder = msgspec.json.Encoder()


async def post_feedback(
    store: RunStore,
    seen_by: RunsOf,
    scope: Scope,
    receive: Receive,
    send: Send,
    run_id: str,
    on_feedback: OnFeedback | None,
) -> None:
    """Keep the request's feedback on `run_id` (a run `seen_by` sees) and answer it 201."""
    body = await read_body(receive, MAX_BODY)
    try:
        entry = decode_feedback(body)
    except FeedbackInvalid as exc:
        raise RequestError(str(exc), param=exc.param, code="invalid_feedback") from None
    run = await store.get_run(run_id, seen_by=seen_by)
    if run is None:
        raise RequestError(f"No run {run_id!r} in the run store.", status_code=404, param="id", code="run_not_found")
    try:
        record = given(entry, run, key_name=scope.get(CALLER), via="api")
    except FeedbackInvalid as exc:
        raise RequestError(str(exc), param=exc.param, code="invalid_feedback") from None
    try:
        kept = await store.give_feedback(record)
    except FeedbackNotKept as exc:
        raise Overloaded(str(exc), status_code=503, code="store_unavailable") from None
    if on_feedback is not None:
        on_feedback(run.served_model, verdict_label(record))
    await JSONAnswer(_encoder.encode(kept), 201)(scope, receive, send)
