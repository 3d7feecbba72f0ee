// The waterfall of a run's stages: one row per stage call, its bar placed at its start offset and as long as
// it took, so stages that ran at the same time (panel lenses, best-of-n candidates) visibly overlap.

import { h, ms } from "./dom.js";

// How long a run's timeline is: the run's duration, or its last stage's end if that is later.
export function span(run) {
  return Math.max(run.durationMs || 0, ...run.stages.map((stage) => stage.startMs + stage.durationMs), 1);
}

// `compact`: only each stage's duration beside its bar; `scale`: the time the track stands for (two timelines
// side by side share one, so their bars compare).
export function timeline(run, compact, scale) {
  const stages = run.stages;
  if (!stages.length) return h("p", { class: "muted" }, "No stage has finished yet.");
  const end = scale || span(run);
  const rows = stages.map((stage, index) => {
    const overlaps = stages.filter(
      (other, at) => at !== index && other.startMs < stage.startMs + stage.durationMs && stage.startMs < other.startMs + other.durationMs,
    );
    const bar = h(
      "div",
      {
        class: `bar${stage.error ? " bar-error" : ""}${overlaps.length ? " bar-overlap" : ""}`,
        title: `${stage.label}: starts at +${ms(stage.startMs)}, takes ${ms(stage.durationMs)}`,
      },
    );
    // Positions go through the CSS object model, which the page's Content-Security-Policy allows
    // (a `style` attribute would not be).
    bar.style.left = `${(100 * stage.startMs) / end}%`;
    bar.style.width = `${Math.max((100 * stage.durationMs) / end, 0.4)}%`;
    const attempts = stage.attempts.length;
    const facts = [
      `+${ms(stage.startMs)}`,
      ms(stage.durationMs),
      `${attempts || 1} attempt${attempts > 1 ? "s" : ""}`,
      overlaps.length ? `overlaps ${overlaps.length} other${overlaps.length > 1 ? "s" : ""}` : null,
      stage.error ? "failed" : null,
    ].filter(Boolean);
    return h(
      "li",
      { class: "lane", "data-stage": stage.name },
      h("button", { type: "button", class: "lane-name link", title: "Show this stage", onclick: () => reveal(index) }, stage.label),
      h("div", { class: "track" }, bar),
      h(
        "span",
        { class: "lane-facts", title: overlaps.length ? `Ran at the same time as ${overlaps.map((other) => other.label).join(", ")}` : null },
        compact ? ms(stage.durationMs) : facts.join(" · "),
      ),
    );
  });
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((share) => {
    const tick = h("span", { class: "tick" }, ms(share * end));
    tick.style.left = `${share * 100}%`;
    return tick;
  });
  return h(
    "div",
    { class: "timeline", id: "timeline" },
    h("ol", { class: "lanes" }, rows),
    h("div", { class: "axis" }, h("span", { class: "lane-name" }), h("div", { class: "track" }, ticks), h("span", { class: "lane-facts" })),
  );
}

function reveal(index) {
  const box = document.getElementById(`stage-${index}`);
  if (!box) return;
  box.open = true;
  box.scrollIntoView({ block: "start" });
  box.querySelector("summary").focus();
}
