"""The benchmark's parts do what they claim (no timings asserted): the micro-benchmarked functions compute the
same forward body, the floor proxies return the upstream's bytes over both transports, the load generator reads
both framings, and the product answers the benchmark's requests as the harness expects."""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from benchmarks import (
    big_upstream,
    loadgen,
    micro,
    mock_upstream,
    paced,
    path,
    payloads,
    recording,
    run,
    sizes,
    sse_reader,
    store_parts,
    variants,
    workflows,
)

from adapter_critic.protocols import anthropic
from adapter_critic.store import database, open_store
from adapter_critic.store.cleaning import Cleaner
from adapter_critic.store.database import Database
from adapter_critic.store.runstore import RunStore
from adapter_critic.store.writes import building
from adapter_critic.workflows.edits import review


@pytest.mark.parametrize("size", micro.SIZES)
def test_forward_bodies_agree(size: str) -> None:
    body = payloads.request_bytes("bench-direct", size)
    expected = {**json.loads(body), "model": payloads.API_MODEL}
    assert msgspec.json.decode(micro.product_forward(body)) == expected
    assert json.loads(micro.stdlib_forward(body)) == expected
    assert msgspec.json.decode(micro.msgspec_forward(body)) == expected


def test_payload_sizes() -> None:
    sizes = {size: len(payloads.request_bytes("bench-direct", size)) for size in micro.SIZES}
    assert sizes["small"] < 200
    assert 1300 < sizes["1.5k"] < 1700
    assert 180_000 < sizes["200k"] < 220_000
    assert len(payloads.request(payloads.API_MODEL, "200k")["tools"]) == 64


def test_review_benchmark_applies_every_edit() -> None:
    draft, reply, expected = payloads.draft_and_review()
    assert len(draft) >= 50_000
    assert micro.review_draft(draft, reply) == review(draft, reply) == expected


def test_the_variant_tables_give_the_spread_of_each_ratio() -> None:
    ratios = {("on", "direct"): [1.1, 1.3, 1.2, 1.5, 1.0], ("one", "direct"): [1.25], ("none", "direct"): []}
    measured = variants.Measured({}, ratios, {}, rounds=5, batch=10, loader="wrk", apart=True)
    assert measured.quartiles(("on", "direct")) == "1.05-1.40 (5 batches, apart)"
    assert measured.quartiles(("one", "direct")) == "1.25 (1 batch)"
    assert measured.quartiles(("none", "direct")) == "no batch"


def test_mock_event_stream_shape() -> None:
    events = payloads.sse_events(payloads.API_MODEL, payloads.ANSWER)
    assert 18 <= len(events) <= 24
    assert events[-1] == b"data: [DONE]\n\n"
    text = "".join(
        (json.loads(e[6:])["choices"] or [{"delta": {}}])[0]["delta"].get("content") or "" for e in events[:-1]
    )
    assert text == payloads.ANSWER


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert loadgen.percentile(values, 50) == 50
    assert loadgen.percentile(values, 99) == 99
    assert loadgen.percentile([3.0], 99) == 3


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, run.Server]]:
    """The mock, both floors and the product, as the benchmark runs them (unpinned)."""
    with tempfile.TemporaryDirectory() as tmp, run.servers_running(Path(tmp), None, None) as started:
        yield started


def test_floors_return_the_upstream_bytes(servers: dict[str, run.Server]) -> None:
    mock = servers["mock"]
    for stream in (False, True):
        upstream_status, upstream = run.post(
            mock.port, "/v1/chat/completions", payloads.request_bytes("x", stream=stream)
        )
        assert upstream_status == 200
        for transport in ("httpx", "aiohttp", "relay"):  # `floor relay`: the bare aiohttp relay, run.py's floor
            body = payloads.request_bytes("bench-direct", stream=stream)
            status, got = run.post(servers[f"floor {transport}"].port, "/v1/chat/completions", body)
            assert (status, got) == (200, upstream), (transport, stream)
    assert upstream.endswith(b"data: [DONE]\n\n")


def test_harness_checks_pass(servers: dict[str, run.Server]) -> None:
    """Every target answers correctly (floors: the mock's bytes; product: the expected answer per mode)."""
    bodies = {"mock": payloads.request_bytes(payloads.API_MODEL)}
    bodies["mock-stream"] = payloads.request_bytes(payloads.API_MODEL, stream=True)
    for mode in ("direct", "adapter", "critic"):
        bodies[mode] = payloads.request_bytes(f"bench-{mode}")
        bodies[f"{mode}-stream"] = payloads.request_bytes(f"bench-{mode}", stream=True)
    for target in run.build_targets(servers):
        run.check(target, bodies, servers["mock"].port)  # raises SystemExit on a wrong answer


@pytest.mark.parametrize("stream", [False, True])
def test_loadgen_batch(servers: dict[str, run.Server], tmp_path: Path, stream: bool) -> None:
    body_file = tmp_path / "body.json"
    body_file.write_bytes(payloads.request_bytes("bench-direct", stream=stream))
    load = run.Load({"body": body_file}, None, use_wrk=False)
    result = load.batch(servers["floor aiohttp"].port, "body", 40, 4, ttfb=True)
    assert result["requests"] == 40
    assert result["errors"] == 0
    assert 0 < result["ttfb_p50_us"] <= result["p99_us"]


@pytest.mark.anyio
async def test_the_sse_benchmark_readers_agree() -> None:
    long = sse_reader.long_event(1)
    pieces = [long[i : i + sse_reader.PIECE] for i in range(0, len(long), sse_reader.PIECE)]
    for parts in (pieces, [long], sse_reader.token_stream(64)):
        assert await sse_reader.read_all(sse_reader.iter_batches, parts) == await sse_reader.read_all(
            sse_reader.quadratic_batches, parts
        )


@pytest.mark.anyio
async def test_the_workflow_benchmark_runs_every_mode() -> None:
    rows = await workflows.measure(requests=2, rounds=1)
    calls = {row["mode"]: row["calls"] for row in rows}
    expected = {"direct": 1, "adapter": 2, "critic": 3, "advisor": 2, "panel": 7, "best_of_3": 7}
    expected |= {"self_consistency_5": 5, "self_refine": 7, "re2": 1}
    expected |= {"moa_3": 4, "cove_3": 6}
    assert calls == {**expected, **{f"{mode} stream": n for mode, n in expected.items()}}
    assert all(row["cpu_us"] > 0 for row in rows)
    assert "best_of_3 stream" in workflows.format_table(rows) and "cove_3 stream" in workflows.format_table(rows)


def test_anthropic_mapping_benchmark_maps_what_it_times() -> None:
    from benchmarks import anthropic_mapping

    sent = json.loads(anthropic_mapping.messages_request_bytes())
    assert sent["system"] and [m["role"] for m in sent["messages"]] == ["user"]
    completion = anthropic.answers.completion(anthropic_mapping.messages_answer())
    assert completion is not None
    assert json.loads(completion)["choices"][0]["message"]["content"] == payloads.ANSWER
    events = anthropic_mapping.stream_events()
    # A chunk per text delta, the role chunk and the input usage chunk, the finish and usage chunks; nothing for the
    # block's start and stop.
    assert anthropic_mapping.translate_stream(events) == len(events) - 1


@pytest.mark.anyio
async def test_the_recording_benchmark_records_what_a_server_would(tmp_path: Path) -> None:
    runs = [recording.run_events() for _ in range(3)]
    records = recording.recorded(runs)
    assert [type(r).__name__ for r in records] == ["RunOpened", "StageDone", "RunClosed"] * 3
    store = await open_store(f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    async with store:
        await store.database.write(records, "bench", Cleaner([]))
        run = await store.get_run(runs[0][0])
    assert run is not None and run.status == "ok" and run.answer is not None
    assert run.answer.content == payloads.ANSWER
    [stage] = run.stages
    assert run.request is not None and run.request.messages is not None
    assert stage.output == payloads.ANSWER and stage.messages == run.request.messages


def test_the_recording_benchmark_reports_the_files_bytes_per_run() -> None:
    results = recording.run_all(quick=True)
    assert set(results["cpu_us"]) == {
        "recorder", "rows", "rows + write", "rows + write, async engine", "encoded (server)", "rebuilt (writer)",
    }  # fmt: skip
    # The answer kept once: about 2.9 KB per direct run (3.5 KB when it was kept three times, 4.9 with 4 KiB pages).
    assert 2000 < results["file_bytes_per_run"] < 3200
    assert "bytes per run" in recording.table(results)


@pytest.mark.anyio
@pytest.mark.parametrize("part", [*store_parts.PARTS, None])
async def test_each_store_part_cuts_the_store_short_where_it_says(
    part: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[int] = []

    def counted(batch: Any, instance: str, clean: Cleaner, seconds: float) -> Any:
        rows = yield from building(batch, instance, clean, seconds)
        made.append(len(rows.opened))
        return rows

    monkeypatch.setattr(database, "building", counted)  # the store's own rows, counted
    if part is not None:
        monkeypatch.setattr(*store_parts.CUTS[part])
    writer = "process" if part == "sent" else "inline"  # `sent` cuts the writer process's store short
    store = RunStore(Database(f"sqlite:///{tmp_path / 'runs.sqlite3'}"), writer=writer)
    await store.start()
    try:
        for record in recording.recorded([recording.run_events() for _ in range(3)]):
            store.enqueue(record)
        queued = store.queue_depth
        await store.flush()
        stored = await store.database.count()
    finally:
        await store.aclose()
    # recorder: nothing reaches the queue; queued: batches are taken, no row is made; rows: made, none written;
    # sent: encoded and framed for the writer process, neither sent nor made into rows.
    expected = {
        "recorder": (0, [], 0),
        "queued": (9, [], 0),
        "rows": (9, [3], 0),
        "sent": (9, [], 0),
        None: (9, [3], 3),
    }
    assert (queued, made, stored) == expected[part]


def test_the_big_upstream_answers_the_size_asked_plain_and_as_one_event() -> None:
    body = sizes.body(4, stream=True)
    assert b'"user": "big-4"' in body
    plain = msgspec.json.decode(big_upstream.plain(1))
    assert len(plain["choices"][0]["message"]["content"]) == 1024 * 1024
    events = big_upstream.stream(1).split(b"\n\n")
    first = msgspec.json.decode(events[0].removeprefix(b"data: "))
    assert len(first["choices"][0]["delta"]["content"]) == 1024 * 1024
    assert events[-2:] == [b"data: [DONE]", b""]


def test_the_size_checks_read_the_growth_of_product_over_relay() -> None:
    result = {"growth": {"store off plain": 1.05, "store on stream": 1.4}}
    found = {c["target"]: c["ok"] for c in sizes.checks(result)}
    assert found == {
        "product/relay CPU at 16 MiB over at 1 MiB, store off plain": True,
        "product/relay CPU at 16 MiB over at 1 MiB, store on stream": False,
    }


def test_the_size_table_splits_the_stores_cpu_between_the_server_and_its_writer() -> None:
    keys = [f"{name} {kind} {mib}" for name in sizes.SERVERS for kind in sizes.KINDS for mib in sizes.MIB]
    result = {
        "cpu_us": dict.fromkeys(keys, 1000.0) | {"store on stream 16": 9000.0},
        "own_us": {key: 400.0 for key in keys if key.startswith("store on")} | {"store on stream 16": 2500.0},
        "ratios": {},
        "growth": {},
    }
    row = next(line for line in sizes.format_table(result).splitlines() if line.startswith("stream 16 MiB"))
    assert row.split()[-2:] == ["2500", "6500"]  # the server's process, its writer


def test_a_batchs_rows_are_made_in_slices_of_time_the_loop_runs_between(monkeypatch: pytest.MonkeyPatch) -> None:
    # A loaded server's batch is hundreds of runs: made in one go it held the event loop for milliseconds.
    from adapter_critic.store import writes

    ticks = itertools.count()  # each look at the clock finds a quarter of a slice gone: a pause every few records
    monkeypatch.setattr(writes, "time", SimpleNamespace(perf_counter=lambda: next(ticks) * writes.SLICE_SECONDS / 4))
    records = list(recording.recorded([recording.run_events() for _ in range(20)]))
    steps = building(records, "bench", Cleaner([]))
    pauses = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            rows = done.value
            break
        pauses += 1
    assert len(records) // 5 <= pauses <= len(records) // 3
    assert rows == writes.batch_rows(records, "bench", Cleaner([]))


def test_a_paced_stream_is_one_write_per_event() -> None:
    events = payloads.paced_events(5)
    assert len(events) == 5 + 4  # role, 5 tokens, finish, usage, [DONE]
    assert run.streamed_text(b"".join(events)) == payloads.PACED_TOKEN * 5
    assert b'"finish_reason": "stop"' in events[-3] and b'"usage"' in events[-2] and events[-1] == b"data: [DONE]\n\n"
    assert b'"user": "paced-200"' in paced.body(200) and b'"stream": true' in paced.body(200)


@pytest.mark.anyio
async def test_the_mock_writes_a_paced_stream_an_event_at_a_time() -> None:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": paced.body(3), "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await mock_upstream.app({"type": "http", "method": "POST"}, receive, send)
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert bodies == [*payloads.paced_events(3), b""]


def test_the_paced_checks_read_per_chunk_ratios_to_the_relay() -> None:
    per_request = {f"{name} {n} cpu": (2.0 if name == "product" else 1.0) * (100 + 10 * n) for name in paced.SERVERS
                   for n in paced.CHUNKS}  # fmt: skip
    per_chunk = {f"{name} {n} {kind}": (1.2 if name == "product" else 1.0) * 10 for name in paced.SERVERS
                 for n in paced.MEASURED for kind in ("user", "system", "cpu")}  # fmt: skip
    per_request |= {
        key.replace("cpu", kind): value for key, value in per_request.items() for kind in ("user", "system")
    }
    result = {"per_request_us": per_request, "per_chunk_us": per_chunk, "rounds": 1, "concurrency": 8}
    found = {c["target"]: c["ok"] for c in paced.checks(result)}
    assert len(found) == 9
    assert found["paced chunk at 2000 chunks: system time per chunk vs the bare relay's"] is True
    assert found["direct stream, paced, 20 chunks: CPU/request vs the bare aiohttp relay"] is True
    assert "x relay sys" in paced.format_table(result)


@pytest.mark.anyio
@pytest.mark.parametrize("chunks", [None, 0, 3])
async def test_the_in_process_path_answers_through_the_product(chunks: int | None) -> None:
    assert await path.measure(chunks, requests=2, rounds=1) > 0
    assert path.events(3) == payloads.paced_events(3) and len(path.events(None)) == 1


@pytest.mark.anyio
async def test_the_in_process_path_is_measured_part_by_part() -> None:
    figures = await path._with_fake_upstream(None, path.parts(requests=2, rounds=1))
    assert [name.split()[1] for name in figures] == ["whole", "upstream", "run", "request's"]
    assert all(figure > 0 for figure in figures.values())


def test_a_baseline_tree_is_imported_from_its_own_source(tmp_path: Path) -> None:
    (tmp_path / "src" / "adapter_critic").mkdir(parents=True)
    (tmp_path / "src" / "adapter_critic" / "__init__.py").write_text("")
    assert run.source_of(tmp_path) == str((tmp_path / "src").resolve())  # a worktree's root
    assert run.source_of(tmp_path / "src") == str((tmp_path / "src").resolve())  # or its src
    with pytest.raises(SystemExit, match="no adapter_critic package"):
        run.source_of(tmp_path / "elsewhere")  # never the installed package instead
