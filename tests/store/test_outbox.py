"""What a server sends its store's writer process (`store.outbox`, `store.wire`): a run's answer that is one of its
stages' outputs crosses the pipe once when that stage goes in the same frame, and again in full when it may not."""

from __future__ import annotations

from adapter_critic.core import Answer, Usage
from adapter_critic.events import Attempt, StageFinished
from adapter_critic.store import wire, writer
from adapter_critic.store.outbox import Outbox
from adapter_critic.store.recorder import Record, RunClosed, StageDone

from .runs import TARGET

TEXT = "An answer of some length, with an accent: é. " * 200


def _stage(run_id: str, index: int, output: str | None) -> StageDone:
    finished = StageFinished("api", TARGET, (Attempt(TARGET),), Usage(1, 2, 3), 4.0, output)
    return StageDone(run_id, index, finished, 0.5, None, "full", None, True)


def _closed(run_id: str, content: str | None, intermediate: dict[str, object]) -> RunClosed:
    return RunClosed(run_id, "ok", 2.0, 9.0, Usage(1, 2, 3), None, intermediate, Answer(content, None, "stop"), "full")


def _sent(encoded: list[bytes]) -> tuple[bytes, list[Record]]:
    """The frame these records go in, and the records the writer rebuilds from it."""
    frame = wire.frame(1, "instance", [], encoded)
    head_length, _ = wire.HEAD.unpack(frame[: wire.HEAD.size])
    return frame, writer.records(wire.body_decoder.decode(frame[wire.HEAD.size + head_length :]))


def test_an_answer_that_is_a_stages_output_in_the_same_frame_is_sent_once() -> None:
    box = Outbox()
    text = TEXT + "1"  # one string: the stage's output, the answer and the final note, as a direct run has them
    box.add(_stage("r", 0, "a draft"), True)
    box.add(_stage("r", 1, text), True)
    box.add(_closed("r", text, {"draft": "a draft", "final": text, "rounds": 2}), True)
    frame, (first, second, closed) = _sent(box.take(3))
    assert frame.count(text.encode()) == 1
    assert isinstance(first, StageDone) and isinstance(second, StageDone) and isinstance(closed, RunClosed)
    assert closed.answer.content is second.finished.output and closed.answer.content == text
    assert closed.intermediate == {"draft": "a draft", "final": text, "rounds": 2}
    assert closed.intermediate["draft"] is first.finished.output


def test_an_answer_is_sent_whole_when_its_stage_may_go_in_an_earlier_frame() -> None:
    box = Outbox()
    text = TEXT + "2"
    box.add(_stage("r", 0, text), True)
    box.add(_closed("r", text, {"final": text}), False)  # behind a full batch: the frame may end before it
    frame, (_, closed) = _sent(box.take(2))
    assert frame.count(text.encode()) == 3
    assert isinstance(closed, RunClosed) and closed.answer.content == text and closed.intermediate == {"final": text}


def test_an_answer_is_sent_whole_when_its_stage_went_in_the_frame_before() -> None:
    box = Outbox()
    text = TEXT + "3"
    box.add(_stage("r", 0, text), True)
    box.take(1)
    box.add(_closed("r", text, {"final": text}), True)
    frame, (closed,) = _sent(box.take(1))
    assert frame.count(text.encode()) == 2
    assert isinstance(closed, RunClosed) and closed.answer.content == text


def test_only_the_runs_own_stages_and_the_same_string_are_referred_to() -> None:
    box = Outbox()
    text = TEXT + "4"
    box.add(_stage("other", 0, text), True)
    box.add(_stage("r", 0, "".join([TEXT, "4"])), True)  # equal, not the same object: compared, still sent once
    box.add(_closed("r", text, {}), True)
    frame, (_, stage, closed) = _sent(box.take(3))
    assert frame.count(text.encode()) == 2  # the other run's stage and this run's
    assert isinstance(stage, StageDone) and isinstance(closed, RunClosed)
    assert closed.answer.content is stage.finished.output
