// The runs list: newest first, filtered by served model, mode and status, paged by the API's cursor, kept
// live by polling the first page, searchable by request id, and driven from the keyboard.

import { ApiError, get } from "./api.js";
import { costNote, count, h, ms, replace, runCost, statusBadge, when } from "./dom.js";
import { listKeys } from "./keys.js";
import { listPage, runView } from "./model.js";

const POLL_MS = 2000;
const PAGE_SIZE = 25;
const MODES = ["direct", "adapter", "critic", "advisor", "panel", "best_of_n"];
const STATUSES = ["running", "ok", "degraded", "error", "cancelled", "interrupted"];

// The first page in the trail of pages before this one ("Newer" goes back along it).
const FIRST = "~";
const fromTrail = (entry) => (!entry || entry === FIRST ? "" : entry);

// Runs marked for comparison (ids), in the order they were marked; at most two.
export const marked = [];

let models = null;

export async function showList(main, params, navigate) {
  const filters = {
    model: params.get("model") || "",
    mode: params.get("mode") || "",
    status: params.get("status") || "",
    request_id: params.get("request_id") || "",
    limit: params.get("limit") || "",
  };
  const cursor = params.get("cursor") || "";
  const limit = Math.min(Math.max(Number.parseInt(params.get("limit"), 10) || PAGE_SIZE, 1), 200);
  const trail = (params.get("trail") || "").split(",").filter(Boolean);
  const table = h("tbody", { id: "runs-body" });
  const note = h("p", { class: "muted", id: "list-note", role: "status" });
  const pager = h("div", { class: "pager" });
  const compareButton = h("button", { type: "button", id: "compare-marked", disabled: true }, "Compare marked");
  const search = h("input", {
    id: "search",
    type: "search",
    placeholder: "Request id",
    "aria-label": "Search by request id",
    autocomplete: "off",
    value: filters.request_id || null,
  });
  const searchNote = h("span", { class: "error", id: "search-note", role: "alert" });

  const setParam = (changes) => {
    const next = new URLSearchParams({ ...filters, ...changes });
    for (const [name, value] of [...next]) if (!value) next.delete(name);
    navigate(`#/runs${next.size ? `?${next}` : ""}`);
  };
  const select = (name, label, options) =>
    h(
      "label",
      {},
      `${label} `,
      h(
        "select",
        { id: `filter-${name}`, onchange: (event) => setParam({ [name]: event.target.value, cursor: "", trail: "" }) },
        h("option", { value: "" }, "any"),
        options.map((option) => h("option", { value: option, selected: option === filters[name] }, option)),
      ),
    );

  if (models === null) {
    try {
      models = (await get("/models")).data.map((model) => model.id);
    } catch {
      models = [];
    }
  }
  const modelOptions = [...new Set([...models, ...(filters.model ? [filters.model] : [])])];
  const searchForm = h(
    "form",
    {
      class: "search",
      onsubmit: async (event) => {
        event.preventDefault();
        const id = search.value.trim();
        if (!id) {
          if (filters.request_id) setParam({ request_id: "" }); // an empty search shows every run again
          return;
        }
        try {
          const found = listPage(await get("/runs", { request_id: id, limit: 2 })).runs;
          if (found.length === 1) navigate(`#/runs/${encodeURIComponent(found[0].id)}`);
          else if (found.length > 1) setParam({ request_id: id });
          else {
            await get(`/runs/${encodeURIComponent(id)}`); // a run id works too
            navigate(`#/runs/${encodeURIComponent(id)}`);
          }
        } catch (error) {
          const missing = error instanceof ApiError && (error.status === 404 || error.status === 400);
          replace(searchNote, missing ? `No run with request id ${id}.` : error.message);
        }
      },
    },
    search,
    h("button", { type: "submit" }, "Open"),
    searchNote,
  );

  replace(
    main,
    h(
      "section",
      { class: "list", "aria-label": "Runs" },
      h(
        "div",
        { class: "filters" },
        select("model", "Model", modelOptions),
        select("mode", "Mode", [...new Set([...MODES, ...(filters.mode ? [filters.mode] : [])])]),
        select("status", "Status", STATUSES),
        searchForm,
        compareButton,
      ),
      h(
        "table",
        { class: "runs", id: "runs" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            h("th", { class: "mark", title: "Mark two runs to compare" }, "⇄"),
            ["Time", "Request id", "Key", "Served model", "Mode", "Status", "Tokens", "Latency", "Cost"].map((name, at) =>
              h("th", { scope: "col", class: at >= 8 ? "num cost" : at >= 6 ? "num" : at === 2 ? "key" : null }, name),
            ),
          ),
        ),
        table,
      ),
      note,
      pager,
      h(
        "p",
        { class: "muted keys" },
        "Keys: ↑/↓ or j/k move, Enter opens, x marks for comparison, c compares, / searches, n/p pages.",
      ),
    ),
  );

  const updateCompare = () => {
    compareButton.disabled = marked.length !== 2;
    compareButton.textContent = `Compare marked (${marked.length}/2)`;
  };
  compareButton.addEventListener("click", () => {
    if (marked.length === 2) navigate(`#/compare/${marked.map(encodeURIComponent).join("/")}`);
  });
  updateCompare();

  const toggleMark = (id, box) => {
    const at = marked.indexOf(id);
    if (at >= 0) marked.splice(at, 1);
    else {
      marked.push(id);
      if (marked.length > 2) marked.shift();
    }
    for (const other of table.querySelectorAll("input.mark")) other.checked = marked.includes(other.dataset.id);
    if (box) box.checked = marked.includes(id);
    updateCompare();
  };

  let seen = null;
  let nextCursor = null;
  let shown = null;
  const render = (runs) => {
    const focusedId = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.id : null;
    const rows = runs.map((run) => {
      const box = h("input", {
        type: "checkbox",
        class: "mark",
        "data-id": run.id,
        "aria-label": `Mark ${run.id} for comparison`,
        checked: marked.includes(run.id),
      });
      box.addEventListener("click", (event) => {
        event.stopPropagation();
        toggleMark(run.id, box);
      });
      const fresh = seen !== null && !seen.has(run.id);
      const row = h(
        "tr",
        {
          tabindex: 0,
          class: `run status-row-${run.status}${fresh ? " fresh" : ""}${run.parentRunId ? " child" : ""}`,
          "data-id": run.id,
          onclick: () => navigate(`#/runs/${encodeURIComponent(run.id)}`),
        },
        h("td", { class: "mark" }, box),
        h("td", { class: "time", title: run.startedAt }, when(run.startedAt)),
        h("td", { class: "id" }, h("a", { href: `#/runs/${encodeURIComponent(run.id)}` }, run.requestId)),
        h("td", { class: "key" }, run.keyName || ""),
        h(
          "td",
          { class: "model" },
          run.servedModel,
          run.parentStage ? h("span", { class: "muted child-of" }, ` ↳ ${run.parentStage}`) : null,
          run.cachedFrom ? h("span", { class: "muted cache-hit", title: `answered from the cache: the answer of run ${run.cachedFrom}` }, " ↺ cache") : null,
        ),
        h("td", { class: "mode" }, run.mode),
        h("td", { class: "status-cell" }, statusBadge(run.status), run.errorType ? h("span", { class: "muted" }, ` ${run.errorType}`) : null),
        h("td", { class: "num" }, count(run.tokens.total)),
        h("td", { class: "num" }, run.status === "running" ? "…" : ms(run.durationMs)),
        h("td", { class: "num cost", title: costNote(run.cost) }, runCost(run.cost)),
      );
      return row;
    });
    replace(table, rows);
    // The cost column shows only when a run on the page has a cost (the server has prices).
    table.closest("table").classList.toggle("priced", runs.some((run) => run.cost !== null));
    // The key column shows only when a run on the page was made with a named key ([[auth.keys]]).
    table.closest("table").classList.toggle("keyed", runs.some((run) => run.keyName !== null));
    seen = new Set(runs.map((run) => run.id));
    if (focusedId) {
      const again = table.querySelector(`tr[data-id="${CSS.escape(focusedId)}"]`);
      if (again) again.focus();
    }
    replace(note, runs.length ? "" : "No runs yet. Requests to this server appear here as they are made.");
  };

  const load = async () => {
    const page = listPage(
      await get("/runs", {
        limit,
        cursor,
        served_model: filters.model,
        mode: filters.mode,
        status: filters.status,
        request_id: filters.request_id,
      }),
    );
    nextCursor = page.nextCursor;
    const snapshot = JSON.stringify(page);
    if (snapshot === shown) return; // nothing changed: keep the rows (and the user's selection or hover) as they are
    shown = snapshot;
    render(page.runs.map(runView));
    replace(
      pager,
      h(
        "button",
        {
          type: "button",
          id: "newer",
          disabled: !cursor,
          onclick: () => setParam({ cursor: fromTrail(trail[trail.length - 1]), trail: trail.slice(0, -1).join(",") }),
        },
        "← Newer",
      ),
      h(
        "button",
        {
          type: "button",
          id: "older",
          disabled: !nextCursor,
          onclick: () => setParam({ cursor: nextCursor, trail: [...trail, cursor || FIRST].join(",") }),
        },
        "Older →",
      ),
      cursor ? null : h("span", { class: "muted live" }, "live"),
    );
  };

  const onKey = listKeys({ table, pager, search, compare: () => compareButton.click(), mark: toggleMark });
  document.addEventListener("keydown", onKey);

  await load();
  let timer = null;
  let stopped = false;
  if (!cursor) {
    const poll = async () => {
      if (stopped) return;
      if (document.visibilityState === "visible") {
        try {
          await load();
        } catch (error) {
          replace(note, `Could not refresh: ${error.message}`);
        }
      }
      if (!stopped) timer = setTimeout(poll, POLL_MS);
    };
    timer = setTimeout(poll, POLL_MS);
  }
  return () => {
    stopped = true;
    document.removeEventListener("keydown", onKey);
    if (timer !== null) clearTimeout(timer);
  };
}
