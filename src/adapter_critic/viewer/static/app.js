// The viewer's shell: hash routes (#/runs, #/runs/<id>, #/compare/<a>/<b>, so every view has a shareable
// URL), the API-key dialog, and the light/dark theme.

import { ApiError, forgetKey, hasKey, onKeyNeeded, setKey } from "./api.js";
import { showCompare } from "./compare.js";
import { showDetail } from "./detail.js";
import { h, jsonBlock, replace } from "./dom.js";
import { showList } from "./list.js";

const main = document.getElementById("main");
let teardown = () => {};
let generation = 0;

function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

async function route() {
  const mine = ++generation;
  teardown();
  teardown = () => {};
  const hash = location.hash.replace(/^#/, "") || "/runs";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  for (const link of document.querySelectorAll("header nav a")) link.removeAttribute("aria-current");
  try {
    let stop;
    if (parts[0] === "compare") {
      document.getElementById("nav-compare").setAttribute("aria-current", "page");
      stop = await showCompare(main, parts.slice(1), navigate);
    } else if (parts[0] === "runs" && parts.length > 1) {
      document.getElementById("nav-runs").setAttribute("aria-current", "page");
      stop = await showDetail(main, parts[1], navigate);
    } else {
      document.getElementById("nav-runs").setAttribute("aria-current", "page");
      stop = await showList(main, new URLSearchParams(query || ""), navigate);
    }
    if (mine !== generation) stop();
    else teardown = stop;
  } catch (error) {
    if (mine !== generation) return;
    replace(
      main,
      h(
        "section",
        { class: "callout error-box", id: "load-error" },
        h("h1", {}, "Could not load"),
        h("p", {}, error.message || String(error)),
        error instanceof ApiError && error.envelope ? jsonBlock(error.envelope) : null,
        noRunsApi(error)
          ? h("p", { class: "muted", id: "store-hint" }, "The viewer reads runs from this server's runs API: turn on the run store (store.url) and the runs API (store.api).")
          : null,
        h("p", {}, h("a", { href: "#/runs" }, "Back to runs")),
      ),
    );
  } finally {
    document.getElementById("forget-key").hidden = !hasKey();
  }
}

function noRunsApi(error) {
  if (!(error instanceof ApiError) || error.status !== 404) return false;
  const code = error.envelope && error.envelope.error ? error.envelope.error.code : null;
  return code === "store_off" || /^Unknown path '[^']*\/runs/.test(error.message);
}

// -- the API key ------------------------------------------------------------------------------------------

const dialog = document.getElementById("key-dialog");
const form = document.getElementById("key-form");
const input = document.getElementById("key-input");
const keyError = document.getElementById("key-error");
let waiting = [];

onKeyNeeded(
  (problem) =>
    new Promise((resolve) => {
      waiting.push(resolve);
      keyError.hidden = !problem;
      keyError.textContent = problem || "";
      if (!dialog.open) dialog.showModal();
      input.focus();
    }),
);

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const key = input.value.trim();
  if (!key) return;
  setKey(key);
  input.value = "";
  dialog.close();
  const resolved = waiting;
  waiting = [];
  for (const resolve of resolved) resolve();
});
dialog.addEventListener("cancel", (event) => event.preventDefault()); // nothing can be shown without a key

document.getElementById("forget-key").addEventListener("click", () => {
  forgetKey();
  route();
});

// -- theme ------------------------------------------------------------------------------------------------

const THEMES = ["auto", "light", "dark"];
const themeButton = document.getElementById("theme");

function applyTheme(theme) {
  if (theme === "auto") document.documentElement.removeAttribute("data-theme");
  else document.documentElement.setAttribute("data-theme", theme);
  themeButton.textContent = `Theme: ${theme}`;
}

themeButton.addEventListener("click", () => {
  const current = localStorage.getItem("adapter_critic.theme") || "auto";
  const next = THEMES[(THEMES.indexOf(current) + 1) % THEMES.length];
  localStorage.setItem("adapter_critic.theme", next);
  applyTheme(next);
});
applyTheme(localStorage.getItem("adapter_critic.theme") || "auto");

window.addEventListener("hashchange", route);
route();
