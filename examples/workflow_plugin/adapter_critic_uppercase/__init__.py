"""An example workflow plug-in for adapter_critic: mode `uppercase` asks the API model, then shouts its answer.

Installed (`pip install examples/workflow_plugin`), it registers itself under the entry-point group
`adapter_critic.workflows`; any served model can then say `mode = "uppercase"`, and any request can ask for it
with `x_adapter_critic: {"mode": "uppercase"}`. Streaming, retries, degrade, events and the response extension
come from adapter_critic's pipeline; the workflow only says what its stages do.
"""

from __future__ import annotations

from adapter_critic import Answer, FinalCall, RunContext, Workflow


class Uppercase(Workflow):
    name = "uppercase"
    stages = ("api",)

    async def run(self, run: RunContext) -> FinalCall | None:
        draft = await run.first_call("api", run.request.messages_json)
        run.note("api_draft", draft.content or "")
        run.set_answer(Answer((draft.content or "").upper(), draft.tool_calls, draft.finish_reason))
        return None  # the answer is known: the pipeline sends it (as chunks, when the client streams)
