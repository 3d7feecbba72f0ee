// A word diff of two texts (Myers' O(ND) algorithm over words and whitespace), and its rendering as text.
//
// diffWords(a, b) returns [op, text] pairs in order, op "=" (both), "-" (only in a) or "+" (only in b);
// joining the "=" and "-" texts gives a, the "=" and "+" texts give b. Texts whose difference is too large
// to search word by word (more than MAX_EDITS edits) are compared line by line, and past that shown as one
// deletion and one insertion.

import { h } from "./dom.js";

const MAX_EDITS = 1500;

export function tokens(text) {
  return text.match(/\s+|[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu) || [];
}

function lines(text) {
  return text.match(/[^\n]*\n|[^\n]+$/g) || [];
}

export function diffWords(a, b) {
  const ops = diffTokens(tokens(a), tokens(b)) || diffTokens(lines(a), lines(b));
  return ops ? readable(ops) : [["-", a], ["+", b]].filter((op) => op[1]);
}

// A word diff reads badly when a change is cut up by the spaces it shares with the other text ("The" → "A",
// " ", "cat" → "dog"): a short equal piece between two changes joins them, and each group of changes becomes
// one deletion followed by one insertion.
function readable(ops) {
  const out = [];
  let del = "";
  let ins = "";
  const flush = () => {
    push(out, "-", del);
    push(out, "+", ins);
    del = "";
    ins = "";
  };
  for (let i = 0; i < ops.length; i++) {
    const [op, text] = ops[i];
    const between = i > 0 && i < ops.length - 1 && (del || ins);
    if (op === "=" && !(between && text.length <= 2 && !text.includes("\n"))) {
      flush();
      push(out, "=", text);
    } else if (op === "=") {
      del += text;
      ins += text;
    } else if (op === "-") del += text;
    else ins += text;
  }
  flush();
  return out;
}

function diffTokens(x, y) {
  let start = 0;
  while (start < x.length && start < y.length && x[start] === y[start]) start++;
  let endX = x.length;
  let endY = y.length;
  while (endX > start && endY > start && x[endX - 1] === y[endY - 1]) {
    endX--;
    endY--;
  }
  const ops = [];
  push(ops, "=", x.slice(0, start).join(""));
  const middle = myers(x.slice(start, endX), y.slice(start, endY));
  if (middle === null) return null;
  for (const [op, part] of middle) push(ops, op, part);
  push(ops, "=", x.slice(endX).join(""));
  return ops;
}

function push(ops, op, text) {
  if (!text) return;
  const last = ops[ops.length - 1];
  if (last && last[0] === op) last[1] += text;
  else ops.push([op, text]);
}

function myers(x, y) {
  const n = x.length;
  const m = y.length;
  if (n === 0 && m === 0) return [];
  if (n === 0) return [["+", y.join("")]];
  if (m === 0) return [["-", x.join("")]];
  const max = Math.min(n + m, MAX_EDITS);
  const offset = max + 1;
  let v = new Int32Array(2 * max + 3);
  const trace = [];
  for (let d = 0; d <= max; d++) {
    trace.push(v.slice());
    for (let k = -d; k <= d; k += 2) {
      let i;
      if (k === -d || (k !== d && v[offset + k - 1] < v[offset + k + 1])) i = v[offset + k + 1];
      else i = v[offset + k - 1] + 1;
      let j = i - k;
      while (i < n && j < m && x[i] === y[j]) {
        i++;
        j++;
      }
      v[offset + k] = i;
      if (i >= n && j >= m) return backtrack(trace, v, x, y, d, offset);
    }
  }
  return null;
}

function backtrack(trace, last, x, y, depth, offset) {
  const steps = [];
  let i = x.length;
  let j = y.length;
  for (let d = depth; d > 0; d--) {
    const v = trace[d];
    const k = i - j;
    const down = k === -d || (k !== d && v[offset + k - 1] < v[offset + k + 1]);
    const prevK = down ? k + 1 : k - 1;
    const prevI = v[offset + prevK];
    const prevJ = prevI - prevK;
    while (i > prevI && j > prevJ) {
      steps.push(["=", x[--i]]);
      j--;
    }
    if (down) steps.push(["+", y[--j]]);
    else steps.push(["-", x[--i]]);
  }
  while (i > 0 && j > 0) {
    steps.push(["=", x[--i]]);
    j--;
  }
  const ops = [];
  for (let s = steps.length - 1; s >= 0; s--) push(ops, steps[s][0], steps[s][1]);
  return ops;
}

// The diff as one <pre>: deletions in <del>, insertions in <ins>, every piece as text.
export function renderDiff(a, b, label) {
  const ops = diffWords(a || "", b || "");
  const changes = ops.filter(([op]) => op !== "=").length;
  const pre = h("pre", { class: "diff", "aria-label": label || "diff" });
  for (const [op, text] of ops) {
    if (op === "=") pre.append(text);
    else pre.append(h(op === "+" ? "ins" : "del", {}, text));
  }
  const summary = changes === 0 ? "identical" : `${changes} change${changes === 1 ? "" : "s"}`;
  return h("div", { class: "diff-box" }, h("p", { class: "muted diff-summary" }, summary), pre);
}
