"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The demo model's parts in the mixture-of-agents and chain-of-verification workflows, each reply saying what its
stage did, so that the technique can be seen at work in the extension and the answer:

- shown earlier responses in the aggregate-and-synthesize prompt (a later layer's proposer, or the aggregator), it
  answers as a synthesis of them, saying how many it read and the seeds they were sampled with;
- as the planner of verification questions, it asks two questions about the draft; as a verifier, it answers each
  on its own (it never sees the draft);
- in the verified final answer, it revises its draft after those answers, saying how many it had.
"""

from __future__ import annotations

import re

from ..workflows.synthesis import DEFAULT_SYNTHESIS_PROMPT, RESPONSES_CLOSE, RESPONSES_OPEN
from ..workflows.verification import DEFAULT_PLAN_SYSTEM_PROMPT, DEFAULT_VERIFY_SYSTEM_PROMPT
from .answers import seed_of

# demo-mixture-of-agents' layers: three proposers, then two, each with a seed of its own (the demo model's answers
# differ by their seed; it ignores temperature), so that each synthesis can name the seeds it read.
LAYERS = [[{"options": {"seed": seed}} for seed in (1, 2, 3)], [{"options": {"seed": seed}} for seed in (11, 12)]]
SYNTHESIS_LEAD = "Demo model synthesis of {count} responses (this is not a real LLM)."
VERIFIED_ANSWER_LEAD = "Demo model answer, revised after {count} independently answered verification questions"
CHECKS = {
    "Is the demo model a real LLM?": "No. The demo model is a small deterministic program that plays each stage's "
    "part; it is not a real LLM.",
    "Has the demo model's draft been checked?": "Not by itself: a draft stays unchecked until questions about it "
    "are answered by someone who has not seen it.",
}
UNCHECKABLE = "The demo verifier cannot check this offline."
_RESPONSE = re.compile(r"<response_(\d+)>\n(.*?)\n</response_\1>", re.DOTALL)
_CHECK = re.compile(r"^Question \d+: ", re.MULTILINE)


def role_reply(system: str, last: str) -> str | None:
    """What the demo model says as the planner of verification questions or a verifier (None: neither)."""
    if system == DEFAULT_PLAN_SYSTEM_PROMPT:
        return "\n".join(f"{i}. {question}" for i, question in enumerate(CHECKS, 1))
    if system == DEFAULT_VERIFY_SYSTEM_PROMPT:
        return CHECKS.get(last.strip(), UNCHECKABLE)
    return None


def synthesis(system: str) -> tuple[str, str] | None:
    """The lead of a synthesis of the responses the system prompt shows, and the note that ends it (the seeds the
    responses were sampled with, when each says); None when it shows none."""
    block = system.partition(DEFAULT_SYNTHESIS_PROMPT)[2]
    if RESPONSES_OPEN not in block:
        return None
    responses = _RESPONSE.findall(block.partition(RESPONSES_OPEN)[2].rpartition(RESPONSES_CLOSE)[0])
    seeds = [seed_of(text) for _, text in responses]
    lead = SYNTHESIS_LEAD.format(count=len(responses))
    if not seeds or not all(seeds):
        return lead, ""
    return lead, f"\n(It read the responses sampled with seeds {', '.join(map(str, seeds))}.)"


def verified_lead(instruction: str) -> str:
    """The lead of the demo model's verified final answer: how many checks it was revised after."""
    return f"{VERIFIED_ANSWER_LEAD.format(count=len(_CHECK.findall(instruction)))} (this is not a real LLM)."
