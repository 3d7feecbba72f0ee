// Building the page from data, as text only: every string becomes a text node, never markup.
//
// h(tag, attrs, ...children): an element; children are nodes, strings (text), numbers, null/false (skipped)
// or arrays of these. Attributes are set with setAttribute, event handlers with "on<event>" keys.

export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else if (child instanceof Node) node.append(child);
    else node.append(document.createTextNode(String(child)));
  }
}

export function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

// One fact of a summary (`dl.summary`): its name and its value.
export function fact(name, ...value) {
  return h("div", {}, h("dt", {}, name), h("dd", {}, ...value));
}

// A text block that keeps the text's line breaks and spaces.
export function textBlock(text, label) {
  if (text === null || text === undefined || text === "") return h("p", { class: "muted" }, "(empty)");
  return h("pre", { class: "text", "aria-label": label || null }, String(text));
}

export function ms(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (value >= 10000) return `${(value / 1000).toFixed(1)} s`;
  if (value >= 1000) return `${(value / 1000).toFixed(2)} s`;
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ms`;
}

export function count(value) {
  if (value === null || value === undefined) return "–";
  return Number(value).toLocaleString("en");
}

export function when(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  const today = new Date();
  const time = date.toLocaleTimeString([], { hour12: false });
  return date.toDateString() === today.toDateString() ? time : `${date.toLocaleDateString()} ${time}`;
}

export function statusBadge(status) {
  return h("span", { class: `status status-${status || "unknown"}` }, status || "unknown");
}

// A JSON value, pretty-printed, as text.
export function jsonBlock(value) {
  return h("pre", { class: "text json" }, JSON.stringify(value, null, 2));
}

// An amount of money without float noise: cents from 1 up, below that every digit down to a millionth.
export function money(amount) {
  if (amount >= 1) return amount.toLocaleString("en", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  if (amount === 0) return "0.00";
  if (amount < 0.000001) return "<0.000001";
  const text = amount.toFixed(6).replace(/0+$/, "");
  return text.split(".")[1].length >= 2 ? text : amount.toFixed(2);
}

// A run's cost (`model.js` runView's `cost`): the total, or "≥ known part" when some stage's cost is unknown
// ("unknown" when nothing of it is known); "–" without a cost.
export function runCost(cost) {
  if (!cost) return "–";
  if (cost.total !== null && cost.unknownStages.length === 0) return `${money(cost.total)} ${cost.currency}`;
  return cost.totalKnown > 0 ? `≥ ${money(cost.totalKnown)} ${cost.currency}` : `unknown (${cost.currency})`;
}

// Why a run's cost is a lower bound, for a tooltip (null when it is not).
export function costNote(cost) {
  return cost && cost.unknownStages.length ? `Unknown for ${cost.unknownStages.join(", ")}: no price for the model, or no usage reported` : null;
}

// A stage call's cost: its amount, "unknown", or "–" without a cost.
export function stageCost(cost) {
  if (!cost) return "–";
  return cost.amount === null ? "unknown" : `${money(cost.amount)} ${cost.currency}`;
}
