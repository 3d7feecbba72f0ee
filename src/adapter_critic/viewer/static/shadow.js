// A run's shadow evaluations (its served model's `shadow`): per evaluation, the candidate that answered the same
// request in the background, whether it won, tied or lost against the live answer — the judge's vote in each order —,
// what each side took (tokens, cost, time) and what the candidate took beyond the live answer, links to the shadow
// run and the judge's runs, and why the evaluation failed when it did.

import { get } from "./api.js";
import { count, h, money, ms, replace, textBlock } from "./dom.js";

// The judge's vote, as stored ("live", "shadow", "tie"; null: no verdict), and the orders it judged in.
const VOTES = { live: "the live answer", shadow: "the candidate", tie: "a tie" };
const ORDERS = ["With the live answer shown first", "With the candidate's answer shown first"];

export function shadowSection(run) {
  if (!run.shadows.length) return null;
  const title = run.shadows.length > 1 ? `Shadow evaluations (${run.shadows.length})` : "Shadow evaluation";
  const summary = h("div", { id: "shadow-summary" }, h("p", { class: "muted" }, "Loading the served model's evaluations…"));
  loadSummary(run.servedModel, summary);
  return h("section", { id: "shadows" }, h("h2", {}, title), run.shadows.map((row) => evaluation(row, run)), summary);
}

// Every evaluation of the served model this reader may see (`GET /shadows/{model}`), per candidate: wins, ties and
// losses, the win rate with its 95 % interval and sign test, and what the candidate adds per request.
async function loadSummary(model, body) {
  let found;
  try {
    found = await get(`/shadows/${encodeURIComponent(model)}`);
  } catch (error) {
    replace(body, h("p", { class: "muted" }, `The served model's evaluations cannot be read: ${error.message}`));
    return;
  }
  const rate = (value) => (value === null ? "–" : value.toFixed(2));
  replace(
    body,
    h("h3", {}, `All ${found.evaluations} evaluations of ${model}`),
    h(
      "ul",
      { class: "shadow-summary" },
      found.data.map((entry) =>
        h(
          "li",
          { "data-candidate": entry.candidate },
          h("strong", {}, entry.candidate),
          `: ${entry.evaluated} judged — won ${entry.won}, tied ${entry.tied}, lost ${entry.lost}; win rate `,
          h("span", { class: "shadow-win-rate" }, `${rate(entry.win_rate)} [${rate(entry.win_rate_ci[0])}, ${rate(entry.win_rate_ci[1])}]`),
          ` (sign test p = ${entry.sign_test_p.toPrecision(2)}); per request `,
          h("span", { class: "shadow-extra" }, `${signed(entry.extra_tokens ?? 0, count)} tokens, ${entry.extra_ms === null ? "–" : signed(entry.extra_ms, ms)}`),
          entry.extra_cost === null ? "" : `, ${signed(entry.extra_cost, money)} cost`,
          entry.failed ? `; ${entry.failed} failed` : "",
        ),
      ),
    ),
  );
}

function evaluation(row, run) {
  return h(
    "div",
    { class: "panel-box shadow", "data-shadow": row.shadowRunId, "data-outcome": row.outcome },
    h(
      "p",
      {},
      h("strong", { class: "shadow-candidate" }, row.candidate),
      " against the live answer of ",
      h("code", {}, row.live.model),
      ": ",
      h("span", { class: `status outcome outcome-${row.outcome}` }, row.outcome),
      row.requestClass ? h("span", { class: "muted" }, ` · class ${row.requestClass}`) : null,
    ),
    row.votes.length
      ? h(
          "ul",
          { class: "shadow-votes" },
          row.votes.map((vote, index) =>
            h("li", { "data-order": index + 1 }, `${ORDERS[index] || `Order ${index + 1}`}, the judge preferred `, h("strong", {}, vote === null ? "nothing (no verdict)" : VOTES[vote] || String(vote))),
          ),
        )
      : null,
    sides(row, run),
    row.error ? h("div", { class: "callout error-box shadow-error" }, h("h4", {}, "Why it failed"), textBlock(row.error, "shadow error")) : null,
  );
}

// Each side's model, run(s), tokens, cost and time; then what the candidate took beyond the live answer.
function sides(row, run) {
  const priced = row.currency !== null;
  const amount = (value) => (value === null ? "–" : `${money(value)} ${row.currency}`);
  const link = (id, text) => h("a", { href: `#/runs/${encodeURIComponent(id)}`, title: id }, text || id);
  // The shadow run, once it ran (it is a child run of this one, `↳ shadow`).
  const shadowRun = row.shadow.runId || (run.children.some((child) => child.id === row.shadowRunId) ? row.shadowRunId : null);
  const line = (name, side, runs) =>
    h(
      "tr",
      {},
      h("th", { scope: "row" }, name),
      h("td", {}, side.model),
      h("td", {}, runs),
      h("td", { class: "num" }, count(side.tokens)),
      priced ? h("td", { class: "num cost" }, amount(side.cost)) : null,
      h("td", { class: "num" }, ms(side.ms)),
    );
  return h(
    "table",
    { class: "shadow-sides" },
    h("thead", {}, h("tr", {}, ["", "Model", "Run", "Tokens", ...(priced ? ["Cost"] : []), "Time"].map((name, at) => h("th", { scope: "col", class: at > 2 ? "num" : null }, name)))),
    h(
      "tbody",
      {},
      line("Live answer", row.live, row.live.runId === run.id ? "this run" : row.live.runId ? link(row.live.runId) : "–"),
      line("Candidate", row.shadow, shadowRun ? h("span", { class: "shadow-run" }, link(shadowRun)) : "–"),
      row.shadow.runId !== null
        ? h(
            "tr",
            { class: "extra" },
            h("th", { scope: "row" }, "Candidate − live"),
            h("td", {}),
            h("td", {}),
            h("td", { class: "num shadow-extra-tokens" }, signed(row.shadow.tokens - row.live.tokens, count)),
            priced ? h("td", { class: "num cost" }, row.shadow.cost === null || row.live.cost === null ? "–" : `${signed(row.shadow.cost - row.live.cost, money)} ${row.currency}`) : null,
            h("td", { class: "num shadow-extra-ms" }, row.shadow.ms === null || row.live.ms === null ? "–" : signed(row.shadow.ms - row.live.ms, ms)),
          )
        : null,
      line(
        "Judge (both orders)",
        row.judge,
        row.judgeRuns.length ? h("span", { class: "judge-runs" }, row.judgeRuns.map((id, index) => [index ? ", " : "", link(id, `order ${index + 1}`)])) : "–",
      ),
    ),
  );
}

// A difference with its sign: "+12", "−3.5 ms" (`show` writes the amount).
function signed(value, show) {
  return `${value < 0 ? "−" : "+"}${show(Math.abs(value))}`;
}
