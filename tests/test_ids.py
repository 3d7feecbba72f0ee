"""Run and response ids sort in creation order (the run store's indexes rely on it) and stay unguessable."""

from __future__ import annotations

import itertools
import re
import time

from adapter_critic.ids import new_id
from adapter_critic.protocols.anthropic.render import new_message_id
from adapter_critic.protocols.openai.render import new_completion_id
from adapter_critic.protocols.responses.outbound import new_id as responses_id


def test_an_id_is_its_prefix_the_time_in_milliseconds_and_random_bits() -> None:
    before = time.time_ns() // 1_000_000
    made = new_id("run-")
    after = time.time_ns() // 1_000_000
    match = re.fullmatch(r"run-([0-9a-f]{12})([0-9a-f]{20})", made)
    assert match is not None
    assert before <= int(match.group(1), 16) <= after


def test_ids_made_later_sort_later() -> None:
    made = [new_id("chatcmpl-")]
    while int(made[-1][9:21], 16) < int(made[0][9:21], 16) + 3:  # ids over at least three milliseconds
        made.append(new_id("chatcmpl-"))
    millis = [int(item[9:21], 16) for item in made]
    assert millis == sorted(millis)
    # Within one millisecond the random part decides; across milliseconds the time does.
    for earlier, later in itertools.pairwise(made):
        if int(later[9:21], 16) > int(earlier[9:21], 16):
            assert later > earlier
    assert len(set(made)) == len(made)


def test_every_protocols_ids_are_time_ordered() -> None:
    now = time.time_ns() // 1_000_000
    made_ids = ((new_completion_id(), "chatcmpl-"), (new_message_id(), "msg_"), (responses_id("resp"), "resp_"))
    for made, prefix in made_ids:
        assert made.startswith(prefix)
        assert abs(int(made[len(prefix) : len(prefix) + 12], 16) - now) < 60_000
        assert len(made) == len(prefix) + 32
