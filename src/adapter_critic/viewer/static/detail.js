// One run: its summary, an auto model's route, the stage waterfall, what its workflow did, its shadow evaluations,
// each stage's target, messages and output, tokens (and, when the server has prices, cost) per stage and in total, and
// its error envelope. A run still going is re-read until it ends.

import { ApiError, get } from "./api.js";
import { costNote, count, fact, h, jsonBlock, ms, replace, runCost, stageCost, statusBadge, textBlock, when } from "./dom.js";
import { feedbackSection, isCritique, stageVerdict } from "./feedback.js";
import { lessonsSection } from "./lessons.js";
import { marked } from "./list.js";
import { contentText, runView } from "./model.js";
import { routeSection } from "./route.js";
import { shadowSection } from "./shadow.js";
import { timeline } from "./timeline.js";
import { valueBlock, workflowView } from "./workflows.js";

const POLL_MS = 1000;
// A run that has just answered may not be written yet (the store writes in batches, a fraction of a second
// later): a run made in the last JUST_MADE_MS (its id says when) is tried this many more times,
// NOT_YET_MS apart, before the page says there is no such run. Any other id is not found at once, and not asked for
// again.
const NOT_YET_TRIES = 10;
const NOT_YET_MS = 300;
const JUST_MADE_MS = 10_000;

export async function showDetail(main, id, navigate) {
  let stopped = false;
  let timer = null;
  let tries = justMade(id) ? 0 : NOT_YET_TRIES;
  const load = async () => {
    let run;
    try {
      run = runView(await get(`/runs/${encodeURIComponent(id)}`));
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 404)) throw error;
      if (stopped) return;
      if (tries < NOT_YET_TRIES) {
        if (tries === 0) replace(main, h("p", { class: "muted", id: "run-pending" }, `Run ${id} was made moments ago: waiting for the run store to write it…`));
        tries += 1;
        timer = setTimeout(load, NOT_YET_MS);
        return;
      }
      replace(
        main,
        h("section", { class: "detail", id: "run-not-found" }, h("h1", {}, "Run not found"), h("p", {}, `No run with id ${id}.`), h("a", { href: "#/runs" }, "Back to runs")),
      );
      return;
    }
    if (stopped) return;
    const open = new Set([...main.querySelectorAll("details[open][data-key]")].map((node) => node.dataset.key));
    replace(main, page(run, navigate, load));
    for (const node of main.querySelectorAll("details[data-key]")) if (open.has(node.dataset.key)) node.open = true;
    if (run.status === "running") timer = setTimeout(load, POLL_MS);
  };
  const onKey = (event) => {
    if (event.target instanceof HTMLInputElement || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "Escape" || event.key === "u") {
      event.preventDefault();
      navigate("#/runs");
    }
  };
  document.addEventListener("keydown", onKey);
  await load();
  return () => {
    stopped = true;
    if (timer !== null) clearTimeout(timer);
    document.removeEventListener("keydown", onKey);
  };
}

// Whether the run id `id` was made in the last JUST_MADE_MS: its 32 hex digits start with its creation time in
// milliseconds (12 digits, `adapter_critic/ids.py`). A clock behind the server's makes a new id look younger still: tried too.
function justMade(id) {
  const found = /([0-9a-f]{12})[0-9a-f]{20}$/.exec(id);
  return found !== null && Date.now() - parseInt(found[1], 16) < JUST_MADE_MS;
}

function page(run, navigate, refresh) {
  const markForCompare = () => {
    if (!marked.includes(run.id)) marked.push(run.id);
    if (marked.length > 2) marked.shift();
    navigate(marked.length === 2 ? `#/compare/${marked.map(encodeURIComponent).join("/")}` : "#/runs");
  };
  return h(
    "article",
    { class: "detail", id: "run-detail", "data-run-id": run.id },
    h("p", { class: "crumbs" }, h("a", { href: "#/runs" }, "← Runs"), " · ", h("a", { href: `#/runs/${encodeURIComponent(run.id)}`, id: "permalink" }, "Link to this run")),
    h("h1", {}, "Run ", h("code", {}, run.id)),
    h(
      "dl",
      { class: "summary" },
      run.requestId !== run.id ? fact("Request id", h("code", {}, run.requestId)) : null,
      run.parentRunId
        ? fact("Part of", h("a", { href: `#/runs/${encodeURIComponent(run.parentRunId)}`, id: "parent-run" }, run.parentRunId), ` (its ${run.parentStage} stage)`)
        : null,
      run.cachedFrom
        ? fact("Answer from the cache", "of run ", h("a", { href: `#/runs/${encodeURIComponent(run.cachedFrom)}`, id: "cached-from" }, run.cachedFrom))
        : null,
      run.keyName ? fact("Key", h("code", { id: "run-key" }, run.keyName)) : null,
      fact("Served model", run.servedModel),
      fact("Mode", run.mode),
      fact("Status", statusBadge(run.status)),
      fact("Started", h("time", { datetime: run.startedAt, title: run.startedAt }, when(run.startedAt))),
      fact("Latency", run.status === "running" ? "running…" : ms(run.durationMs)),
      fact("Tokens", `${count(run.tokens.total)} (${count(run.tokens.prompt)} prompt, ${count(run.tokens.completion)} completion)`),
      run.cost ? fact("Cost", h("span", { id: "run-cost", title: costNote(run.cost) }, runCost(run.cost))) : null,
      fact("Streamed", run.stream ? "yes" : "no"),
    ),
    h("p", {}, h("button", { type: "button", id: "compare-this", onclick: markForCompare }, "Compare with another run")),
    run.capture === "metadata" ? h("p", { class: "callout degraded" }, "Recorded with capture = metadata: no message text was kept.") : null,
    run.error
      ? h("section", { class: "callout error-box", id: "run-error" }, h("h2", {}, `Error: HTTP ${run.error.status}`), jsonBlock(run.error.body))
      : null,
    routeSection(run),
    h("section", {}, h("h2", {}, "Timeline"), timeline(run)),
    workflowSection(run),
    h(
      "section",
      { id: "answer" },
      h("h2", {}, "Final answer", run.finishReason ? h("span", { class: "muted" }, ` (finish_reason: ${run.finishReason})`) : null),
      run.answer === null && run.toolCalls
        ? null
        : run.answer === null && run.status !== "ok" && run.status !== "degraded"
          ? h("p", { class: "muted" }, run.status === "running" ? "Not yet: the run is still going." : `No answer: the run ended ${run.status}.`)
          : textBlock(run.answer, "final answer"),
      run.toolCalls ? [h("h4", {}, "Tool calls"), jsonBlock(run.toolCalls)] : null,
    ),
    run.status === "running" ? null : feedbackSection(run, refresh),
    shadowSection(run),
    lessonsSection(run),
    h("section", { id: "stages" }, h("h2", {}, "Stages"), run.stages.map((stage, index) => stageBox(stage, index, run, refresh))),
    run.children.length ? h("section", { id: "children" }, h("h2", {}, "Child runs"), childTable(run.children)) : null,
    h("section", { id: "tokens" }, h("h2", {}, "Tokens"), tokenTable(run)),
    run.options || run.messages
      ? h(
          "details",
          { "data-key": "request", id: "request" },
          h("summary", {}, "The client's request"),
          run.messages ? [h("h4", {}, "Messages"), messageList(run.messages)] : null,
          h("h4", {}, "Options"),
          jsonBlock(run.options || {}),
        )
      : null,
    h(
      "details",
      { "data-key": "intermediate" },
      h("summary", {}, "Every intermediate value"),
      h("dl", { class: "values" }, Object.entries(run.intermediate).map(([key, value]) => [h("dt", {}, key), h("dd", {}, valueBlock(value))])),
    ),
  );
}

function workflowSection(run) {
  const parts = workflowView(run);
  return parts.length ? h("section", { id: "workflow" }, h("h2", {}, "What the workflow did"), parts) : null;
}

// The runs that stages of this one were: another served model's workflow, run in-process, recorded on its own.
function childTable(children) {
  return h(
    "table",
    { class: "children" },
    h("thead", {}, h("tr", {}, ["Stage", "Run", "Served model", "Mode", "Status", "Tokens", "Latency"].map((name) => h("th", { scope: "col" }, name)))),
    h(
      "tbody",
      {},
      children.map((child) =>
        h(
          "tr",
          { "data-child": child.id },
          h("td", {}, child.stage),
          h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(child.id)}` }, child.id)),
          h("td", {}, child.servedModel),
          h("td", {}, child.mode),
          h("td", {}, statusBadge(child.status)),
          h("td", { class: "num" }, count(child.tokens.total)),
          h("td", { class: "num" }, ms(child.durationMs)),
        ),
      ),
    ),
  );
}

function stageBox(stage, index, run, refresh) {
  return h(
    "details",
    { class: `stage${stage.error ? " stage-error" : ""}`, id: `stage-${index}`, "data-key": `stage-${index}`, "data-stage": stage.name },
    h(
      "summary",
      {},
      h("strong", {}, stage.label),
      ` · ${stage.target} · ${ms(stage.durationMs)} · ${count(stage.tokens.total)} tokens`,
      stage.cost ? ` · ${stageCost(stage.cost)}` : null,
      stage.error ? h("span", { class: "status status-error" }, "failed") : null,
    ),
    h(
      "div",
      { class: "stage-body" },
      stage.attempts.length > 1 || stage.attempts.some((attempt) => attempt.error)
        ? h(
            "div",
            {},
            h("h4", {}, "Attempts"),
            h(
              "ol",
              { class: "attempts" },
              stage.attempts.map((attempt) => h("li", {}, attempt.target, attempt.error ? jsonBlock(attempt.error) : " — answered")),
            ),
          )
        : null,
      stage.error ? h("div", { class: "callout error-box" }, h("h4", {}, "Error"), jsonBlock(stage.error)) : null,
      stage.childRunId
        ? h("p", { class: "child-run" }, "Another served model's workflow ran this stage: ", h("a", { href: `#/runs/${encodeURIComponent(stage.childRunId)}` }, `run ${stage.childRunId}`))
        : null,
      h("h4", {}, "Messages sent"),
      stage.messages === null ? h("p", { class: "muted" }, "Not recorded (capture = metadata).") : messageList(stage.messages),
      h("h4", {}, "Output"),
      stage.output === null ? h("p", { class: "muted" }, stage.error ? "No output: the stage failed." : "Not recorded.") : textBlock(stage.output, `${stage.label} output`),
      run.status !== "running" && isCritique(stage) ? stageVerdict(run, stage, refresh) : null,
    ),
  );
}

function messageList(messages) {
  return h(
    "ol",
    { class: "messages" },
    messages.map((message) =>
      h(
        "li",
        { class: `message role-${message.role}` },
        h("span", { class: "role" }, String(message.role)),
        textBlock(contentText(message.content)),
        message.tool_calls ? jsonBlock(message.tool_calls) : null,
      ),
    ),
  );
}

// Tokens per stage call and in total, with a Cost column when the run has a cost.
function tokenTable(run) {
  const priced = run.cost !== null || run.stages.some((stage) => stage.cost !== null);
  const row = (name, tokens, note, cost) =>
    h(
      "tr",
      {},
      h("th", { scope: "row" }, name),
      h("td", { class: "num" }, count(tokens.prompt)),
      h("td", { class: "num" }, count(tokens.completion)),
      h("td", { class: "num" }, count(tokens.total)),
      priced ? h("td", { class: "num cost" }, cost) : null,
      h("td", { class: "muted" }, note || ""),
    );
  const columns = ["Stage", "Prompt", "Completion", "Total", ...(priced ? ["Cost"] : []), ""];
  return h(
    "table",
    { class: "tokens" },
    h("thead", {}, h("tr", {}, columns.map((name, at) => h("th", { scope: "col", class: at && at < columns.length - 1 ? "num" : null }, name)))),
    h(
      "tbody",
      {},
      run.stages.map((stage) => row(stage.label, stage.tokens, stage.reported ? "" : "not reported by the upstream", stageCost(stage.cost))),
      row("Total", run.tokens, costNote(run.cost), runCost(run.cost)),
    ),
  );
}
