// Two runs side by side (e.g. one prompt through demo-direct and demo-critic), with a diff of their answers.

import { get } from "./api.js";
import { renderDiff } from "./diff.js";
import { costNote, count, h, ms, replace, runCost, statusBadge, textBlock, when } from "./dom.js";
import { marked } from "./list.js";
import { runView } from "./model.js";
import { span, timeline } from "./timeline.js";

export async function showCompare(main, ids, navigate) {
  // Esc (or u) leaves for the runs list, as it leaves a run; in a field, Esc only leaves the field.
  const onKey = (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target instanceof HTMLInputElement) {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    if (event.key === "Escape" || event.key === "u") {
      event.preventDefault();
      navigate("#/runs");
    }
  };
  document.addEventListener("keydown", onKey);
  const stop = () => document.removeEventListener("keydown", onKey);
  try {
    return await compareView(main, ids, navigate, stop);
  } catch (error) {
    stop();
    throw error;
  }
}

async function compareView(main, ids, navigate, stop) {
  const [first, second] = [ids[0] || marked[0] || "", ids[1] || marked[1] || ""];
  const pick = h(
    "form",
    {
      class: "pick",
      onsubmit: (event) => {
        event.preventDefault();
        const a = event.target.elements.a.value.trim();
        const b = event.target.elements.b.value.trim();
        if (a && b) navigate(`#/compare/${encodeURIComponent(a)}/${encodeURIComponent(b)}`);
      },
    },
    h("label", {}, "Run A ", h("input", { name: "a", value: first, placeholder: "request id", required: true, autocomplete: "off" })),
    h("label", {}, "Run B ", h("input", { name: "b", value: second, placeholder: "request id", required: true, autocomplete: "off" })),
    h("button", { type: "submit" }, "Compare"),
  );
  if (ids.length < 2) {
    replace(
      main,
      h(
        "section",
        { class: "compare" },
        h("h1", {}, "Compare two runs"),
        h("p", { class: "muted" }, "Mark two runs in the list (x, or the ⇄ boxes), or give their ids."),
        pick,
      ),
    );
    return stop;
  }
  const [a, b] = (await Promise.all(ids.slice(0, 2).map((id) => get(`/runs/${encodeURIComponent(id)}`)))).map(runView);
  replace(
    main,
    h(
      "section",
      { class: "compare", id: "compare" },
      h("h1", {}, "Compare"),
      pick,
      h("div", { class: "columns" }, side("A", a, Math.max(span(a), span(b))), side("B", b, Math.max(span(a), span(b)))),
      h("section", { class: "panel-box", id: "answer-diff" }, h("h2", {}, "Final answers: A → B"), renderDiff(a.answer || "", b.answer || "", "answer A to B")),
    ),
  );
  return stop;
}

function side(label, run, scale) {
  return h(
    "section",
    { class: "side", "data-side": label, "data-run-id": run.id },
    h("h2", {}, `${label}: `, h("a", { href: `#/runs/${encodeURIComponent(run.id)}` }, run.id)),
    h(
      "dl",
      { class: "summary" },
      h("div", {}, h("dt", {}, "Served model"), h("dd", {}, run.servedModel)),
      h("div", {}, h("dt", {}, "Mode"), h("dd", {}, run.mode)),
      h("div", {}, h("dt", {}, "Status"), h("dd", {}, statusBadge(run.status))),
      h("div", {}, h("dt", {}, "Started"), h("dd", {}, when(run.startedAt))),
      h("div", {}, h("dt", {}, "Latency"), h("dd", {}, ms(run.durationMs))),
      h("div", {}, h("dt", {}, "Tokens"), h("dd", {}, count(run.tokens.total))),
      run.cost ? h("div", {}, h("dt", {}, "Cost"), h("dd", { class: "cost", title: costNote(run.cost) }, runCost(run.cost))) : null,
    ),
    timeline(run, true, scale),
    h("h3", {}, "Final answer"),
    textBlock(run.answer, `answer ${label}`),
  );
}
