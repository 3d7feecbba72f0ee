"""The Responses benchmark compares like with like (no timings asserted): each Responses request maps onto the same
chat messages and tools as the chat request it was made from, and every figure is produced."""

from __future__ import annotations

import json

import pytest
from benchmarks import micro, payloads
from benchmarks import responses as bench

from adapter_critic.protocols.responses.protocol import INBOUND
from adapter_critic.request.decode import decode_request


@pytest.mark.parametrize("size", micro.SIZES)
def test_the_responses_form_is_the_same_conversation(size: str) -> None:
    chat = payloads.request("bench-direct", size)
    mapped = INBOUND.decode(json.dumps(bench.responses_request(chat)).encode(), max_messages=None)
    direct = decode_request(json.dumps(chat).encode())
    assert json.loads(bytes(mapped.messages_json)) == json.loads(bytes(direct.messages_json))
    assert json.loads(bytes(mapped.options.get("tools", b"null"))) == json.loads(
        bytes(direct.options.get("tools", b"null"))
    )


def test_every_figure_is_produced() -> None:
    results = bench.run_all(quick=True)
    assert set(results["request"]) == set(micro.SIZES)
    assert results["stream"]["chunks"] == 20
    table = bench.format_table(results)
    assert "answer body" in table and "stream of 20 chunks" in table
