// Feedback on a run (`POST /runs/{id}/feedback`): thumbs up or down with an optional comment, accept or reject on
// a critique stage's output, and the feedback already given. After each, the page is read again.

import { post } from "./api.js";
import { h, when } from "./dom.js";

// Stages whose output judges another's (a critique, a review, a verdict): they get accept and reject.
const CRITIQUE = /critic|critique|review|judge|verif|lens/i;

export function isCritique(stage) {
  return CRITIQUE.test(stage.name) && stage.output !== null;
}

async function give(run, body, status, refresh) {
  status.textContent = "Sending…";
  try {
    await post(`/runs/${encodeURIComponent(run.id)}/feedback`, body);
  } catch (error) {
    status.textContent = `Not kept: ${error.message}`;
    status.className = "feedback-status error";
    return;
  }
  status.textContent = "Thanks: feedback kept.";
  await refresh();
}

// The run's feedback box: thumbs, a comment, and the entries so far.
export function feedbackSection(run, refresh) {
  const comment = h("textarea", { id: "feedback-comment", rows: 3, placeholder: "What was good or wrong? (optional)", "aria-label": "Comment" });
  const status = h("p", { class: "feedback-status muted", id: "feedback-status", role: "status" });
  const send = (score) => () => give(run, { score, ...(comment.value.trim() ? { comment: comment.value.trim() } : {}) }, status, refresh);
  return h(
    "section",
    { id: "feedback" },
    h("h2", {}, "Feedback"),
    h(
      "div",
      { class: "feedback-form" },
      comment,
      h(
        "p",
        { class: "feedback-buttons" },
        h("button", { type: "button", id: "thumbs-up", title: "Good answer (score 1)", onclick: send(1) }, "▲ Good"),
        " ",
        h("button", { type: "button", id: "thumbs-down", title: "Bad answer (score -1)", onclick: send(-1) }, "▼ Bad"),
      ),
      status,
    ),
    run.feedback.length
      ? h("ol", { class: "feedback-list", id: "feedback-list" }, run.feedback.map(entryItem))
      : h("p", { class: "muted", id: "no-feedback" }, "No feedback yet."),
  );
}

function entryItem(entry) {
  const thumb = entry.score > 0 ? "▲" : entry.score < 0 ? "▼" : "·";
  return h(
    "li",
    { class: "feedback-entry", "data-feedback": entry.id, "data-score": entry.score },
    h("span", { class: "score", title: `score ${entry.score}` }, thumb, ` ${entry.score}`),
    entry.verdict ? h("span", { class: `verdict verdict-${entry.verdict}` }, ` ${entry.verdict}ed ${entry.stage}`) : null,
    entry.label ? h("span", { class: "label" }, ` [${entry.label}]`) : null,
    h("span", { class: "muted" }, ` · ${entry.keyName ? `key ${entry.keyName}` : entry.via === "cli" ? "command line" : "no key"} · `, h("time", { datetime: entry.createdAt, title: entry.createdAt }, when(entry.createdAt))),
    entry.comment ? h("p", { class: "comment" }, entry.comment) : null,
    entry.correctedAnswer ? h("div", {}, h("h4", {}, "Corrected answer"), h("pre", { class: "text" }, entry.correctedAnswer)) : null,
  );
}

// Accept and reject on a critique stage's output, with the verdicts it has had.
export function stageVerdict(run, stage, refresh) {
  const status = h("span", { class: "feedback-status muted", role: "status" });
  const judge = (verdict) => () => give(run, { score: verdict === "accept" ? 1 : -1, stage: stage.name, stage_index: stage.index, verdict }, status, refresh);
  const given = run.feedback.filter((entry) => entry.stageIndex === stage.index && entry.verdict);
  return h(
    "div",
    { class: "stage-verdict", "data-stage-index": stage.index },
    h("button", { type: "button", class: "accept", onclick: judge("accept") }, "✓ Accept this critique"),
    " ",
    h("button", { type: "button", class: "reject", onclick: judge("reject") }, "✗ Reject"),
    " ",
    status,
    given.length ? h("p", { class: "verdicts" }, given.map((entry) => h("span", { class: `verdict verdict-${entry.verdict}` }, `${entry.verdict}ed`, entry.keyName ? ` by ${entry.keyName}` : "", " "))) : null,
  );
}
