// What each workflow did, in its own terms: the adapter's edits and rejected replies, the critique(s) beside
// the draft → final diff, best-of-n's candidates and verdicts, the advisor's guidance, mixture-of-agents' layers,
// chain-of-verification's questions and answers beside the baseline → final diff.

import { renderDiff } from "./diff.js";
import { h, jsonBlock, textBlock } from "./dom.js";
import { parsed } from "./model.js";

const VIEWS = {
  adapter,
  critic,
  panel,
  best_of_n: bestOfN,
  advisor,
  mixture_of_agents: mixtureOfAgents,
  chain_of_verification: chainOfVerification,
};

export function workflowView(run) {
  const view = VIEWS[run.mode];
  const parts = view ? view(run) : [];
  const errors = Object.entries(run.intermediate).filter(([key]) => key.endsWith("_error") || key.endsWith("_errors"));
  if (errors.length) {
    parts.unshift(
      h(
        "div",
        { class: "callout degraded" },
        h("strong", {}, "Degraded: "),
        errors.map(([key, value]) => h("div", {}, `${key}: `, valueBlock(parsed(value)))),
      ),
    );
  }
  return parts;
}

function final(run) {
  return run.intermediate.final ?? run.answer ?? "";
}

function draftToFinal(run, draftKey) {
  const draft = run.intermediate[draftKey];
  if (draft === undefined) return h("p", { class: "muted" }, "No draft was recorded.");
  return h(
    "section",
    { class: "panel-box", id: "draft-final" },
    h("h3", {}, "Draft → final"),
    renderDiff(draft, final(run), "draft to final"),
    h(
      "details",
      {},
      h("summary", {}, "Draft and final side by side"),
      h(
        "div",
        { class: "columns" },
        h("div", {}, h("h4", {}, "Draft"), textBlock(draft, "draft")),
        h("div", {}, h("h4", {}, "Final"), textBlock(final(run), "final")),
      ),
    ),
  );
}

const BLOCK = /^<{5,9} ?SEARCH\s*\n([\s\S]*?)\n?={5,9}\s*\n([\s\S]*?)\n?>{5,9} ?REPLACE\s*$/gm;

function edits(reply) {
  return [...reply.replace(/\r\n/g, "\n").matchAll(BLOCK)].map((match) => ({ search: match[1], replace: match[2] }));
}

function adapter(run) {
  const replies = run.stages.filter((stage) => stage.name === "adapter" && stage.output !== null).map((stage) => stage.output);
  if (!replies.length && run.intermediate.adapter !== undefined) replies.push(run.intermediate.adapter);
  const reason = run.intermediate.adapter_rejection_reason;
  // Every reply before the last was rejected (the adapter was asked again); the last too when a reason stands.
  const rejected = reason === undefined ? replies.slice(0, -1) : replies;
  const accepted = reason === undefined ? replies[replies.length - 1] : undefined;
  const parts = [draftToFinal(run, "api_draft")];
  if (accepted !== undefined) {
    const blocks = edits(accepted);
    parts.push(
      h(
        "section",
        { class: "panel-box", id: "edits" },
        h("h3", {}, blocks.length ? `Edits (${blocks.length})` : "Adapter reply"),
        blocks.length
          ? h(
              "ol",
              { class: "edits" },
              blocks.map((edit, index) => h("li", {}, h("span", { class: "muted" }, `Edit ${index + 1}`), renderDiff(edit.search, edit.replace, `edit ${index + 1}`))),
            )
          : textBlock(accepted, "adapter reply"),
      ),
    );
  }
  if (rejected.length || reason !== undefined) {
    parts.push(
      h(
        "section",
        { class: "panel-box rejected", id: "rejected" },
        h("h3", {}, `Rejected replies (${rejected.length})`),
        reason !== undefined ? h("p", { class: "error" }, `Last reason: ${reason}`) : null,
        rejected.map((reply, index) => h("div", {}, h("h4", {}, `Reply ${index + 1}`), textBlock(reply))),
      ),
    );
  }
  return parts;
}

function critiqueBeside(run, critiques) {
  return h(
    "div",
    { class: "columns wide" },
    h("section", { class: "panel-box", id: "critique" }, h("h3", {}, critiques.length > 1 ? "Critiques" : "Critique"), critiques),
    draftToFinal(run, "api_draft"),
  );
}

function critic(run) {
  const critique = run.intermediate.critic;
  return [critiqueBeside(run, [critique === undefined ? h("p", { class: "muted" }, "No critique.") : textBlock(critique, "critique")])];
}

function panel(run) {
  const lenses = parsed(run.intermediate.lenses);
  const items = [];
  if (lenses && typeof lenses === "object") {
    for (const [name, critique] of Object.entries(lenses)) items.push(h("div", { class: "lens", "data-lens": name }, h("h4", {}, name), valueBlock(critique)));
  } else if (lenses !== undefined) items.push(valueBlock(lenses));
  if (run.intermediate.coordinator !== undefined) {
    items.push(h("div", { class: "lens coordinator" }, h("h4", {}, "Coordinator"), textBlock(run.intermediate.coordinator)));
  }
  return [critiqueBeside(run, items.length ? items : [h("p", { class: "muted" }, "No critiques.")])];
}

function bestOfN(run) {
  const candidates = parsed(run.intermediate.candidates);
  const judgments = parsed(run.intermediate.judgments);
  const chosen = run.intermediate.chosen === undefined ? null : Number(parsed(run.intermediate.chosen));
  const list = Array.isArray(candidates) ? candidates : [];
  return [
    h(
      "section",
      { class: "panel-box", id: "candidates" },
      h("h3", {}, `Candidates (${list.length})`),
      h(
        "ol",
        { class: "candidates" },
        list.map((text, index) =>
          h(
            "li",
            { class: index === chosen ? "chosen" : text === null ? "failed" : null, "data-candidate": index + 1 },
            h("h4", {}, `Candidate ${index + 1}`, index === chosen ? " — chosen" : "", text === null ? " — failed" : ""),
            text === null ? null : valueBlock(text),
          ),
        ),
      ),
    ),
    h(
      "section",
      { class: "panel-box", id: "judgments" },
      h("h3", {}, "Judge's verdicts"),
      Array.isArray(judgments) && judgments.length
        ? h("ol", { class: "verdicts" }, judgments.map((verdict) => h("li", {}, verdictView(verdict))))
        : h("p", { class: "muted" }, "No verdicts."),
    ),
  ];
}

// A pairwise comparison ({pair, votes, winner, tie, reasons}) or a pointwise score ({candidate, score, reason}),
// candidates by their index from 0, shown numbered from 1 as the stages are.
function verdictView(verdict) {
  if (verdict && Array.isArray(verdict.pair)) {
    const [a, b] = verdict.pair.map((index) => index + 1);
    const outcome = verdict.tie ? `tie, kept by candidate ${Number(verdict.winner) + 1}` : `candidate ${Number(verdict.winner) + 1} wins`;
    return [
      h("strong", {}, `Candidate ${a} vs ${b}: ${outcome}`),
      Array.isArray(verdict.votes) ? h("span", { class: "muted" }, ` (votes, both orders: ${verdict.votes.map((v) => v === null ? "none" : Number(v) + 1).join(", ")})`) : null,
      (verdict.reasons || []).map((reason) => textBlock(reason)),
    ];
  }
  if (verdict && verdict.candidate !== undefined) {
    const score = verdict.score === null || verdict.score === undefined ? "no score" : `score ${verdict.score}`;
    return [h("strong", {}, `Candidate ${Number(verdict.candidate) + 1}: ${score}`), verdict.reason ? textBlock(verdict.reason) : null];
  }
  return valueBlock(verdict);
}

// Any intermediate value: text as text, JSON data (a panel's lenses, best-of-n's verdicts) pretty-printed.
export function valueBlock(value) {
  return typeof value === "string" || value === null || value === undefined ? textBlock(value) : jsonBlock(value);
}

function advisor(run) {
  const guidance = run.intermediate.advisor;
  return [
    h(
      "section",
      { class: "panel-box", id: "guidance" },
      h("h3", {}, "Advisor's guidance"),
      guidance === undefined ? h("p", { class: "muted" }, "No guidance.") : textBlock(guidance),
    ),
  ];
}

// Each layer's answers in order, a failed proposer marked (the aggregator's is the final answer, shown below).
function mixtureOfAgents(run) {
  const layers = parsed(run.intermediate.layers);
  const list = Array.isArray(layers) ? layers : [];
  return [
    h(
      "section",
      { class: "panel-box", id: "layers" },
      h("h3", {}, `Layers (${list.length})`),
      list.map((answers, depth) =>
        h(
          "div",
          { class: "layer", "data-layer": depth + 1 },
          h("h4", {}, `Layer ${depth + 1}`),
          h(
            "ol",
            { class: "candidates" },
            (Array.isArray(answers) ? answers : []).map((text, index) =>
              h(
                "li",
                { class: text === null ? "failed" : null, "data-proposer": `${depth + 1}.${index + 1}` },
                h("h4", {}, `Proposer ${depth + 1}.${index + 1}`, text === null ? " — failed" : ""),
                text === null ? null : valueBlock(text),
              ),
            ),
          ),
        ),
      ),
    ),
  ];
}

// The verification questions, each with the answer it got on its own (or none), beside the baseline → final diff.
function chainOfVerification(run) {
  const questions = parsed(run.intermediate.questions);
  const checks = parsed(run.intermediate.verifications);
  const answers = new Map((Array.isArray(checks) ? checks : []).map((check) => [check.question, check.answer]));
  const list = Array.isArray(questions) ? questions : [];
  return [
    h(
      "div",
      { class: "columns wide" },
      h(
        "section",
        { class: "panel-box", id: "verifications" },
        h("h3", {}, `Verification questions (${list.length})`),
        list.length
          ? h(
              "ol",
              { class: "verifications" },
              list.map((question, index) =>
                h(
                  "li",
                  { class: answers.has(question) ? null : "failed", "data-question": index + 1 },
                  h("h4", {}, question, answers.has(question) ? "" : " — not answered"),
                  answers.has(question) ? textBlock(answers.get(question)) : null,
                ),
              ),
            )
          : h("p", { class: "muted" }, "No verification questions: the baseline stands."),
      ),
      draftToFinal(run, "baseline"),
    ),
  ];
}
