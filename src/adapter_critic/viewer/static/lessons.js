// The lessons a learning served model's reviewers had (docs/guides/learning.md): on the page of a run that used
// some, every version of its model's lessons, newest first — what each added and dropped, its status and what its
// check found — the one this run used marked.

import { get } from "./api.js";
import { h, replace } from "./dom.js";

export function lessonsSection(run) {
  const used = run.intermediate.lessons_version;
  if (used === undefined) return null;
  const body = h("div", { id: "lessons-versions" }, h("p", { class: "muted" }, "Loading the versions…"));
  load(run.servedModel, used, body);
  return h("section", { id: "lessons" }, h("h2", {}, `Lessons: version ${used}`), body);
}

async function load(model, used, body) {
  let found;
  try {
    found = await get(`/lessons/${encodeURIComponent(model)}`);
  } catch (error) {
    replace(body, h("p", { class: "muted" }, `The versions cannot be read: ${error.message}`));
    return;
  }
  replace(body, h("ol", { class: "lessons-list", reversed: true }, found.data.map((version) => versionItem(version, used))));
}

function versionItem(version, used) {
  const check = version.note && version.note.wins !== undefined ? checkLine(version.note) : null;
  const kept = version.lessons.filter((lesson) => !version.added.includes(lesson));
  return h(
    "li",
    { class: `lessons-version ${version.status}`, "data-version": version.version },
    h(
      "p",
      {},
      h("strong", {}, `Version ${version.version}`),
      ` · ${version.status}`,
      version.parent !== null ? ` · learnt after version ${version.parent}` : "",
      version.version === used ? h("span", { class: "badge", id: "lessons-used" }, "used by this run") : null,
    ),
    check ? h("p", { class: "muted" }, check) : null,
    h(
      "ul",
      { class: "lessons-diff" },
      version.added.map((lesson) => h("li", { class: "added" }, `+ ${lesson}`)),
      version.removed.map((lesson) => h("li", { class: "removed" }, `− ${lesson}`)),
      kept.map((lesson) => h("li", { class: "kept" }, `  ${lesson}`)),
    ),
  );
}

function checkLine(note) {
  const score = (value) => (value === null || value === undefined ? "–" : value.toFixed(3));
  return `Checked on ${note.items} held-out items: ${score(note.score_before)} → ${score(note.score_after)} (wins ${note.wins}, ties ${note.ties}, losses ${note.losses})`;
}
