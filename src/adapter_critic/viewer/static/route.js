// Why a run of an auto served model went to the candidate that answered it (the run's `route` note): the
// candidate — a link to its run —, what chose it (a rule, the policy, exploration or the default), the request's
// class and features, and the effort it was chosen at.

import { fact, h, money } from "./dom.js";

export function routeSection(run) {
  const route = run.route;
  if (!route) return null;
  const candidate = route.childRunId
    ? h("a", { href: `#/runs/${encodeURIComponent(route.childRunId)}`, id: "route-candidate" }, route.candidate)
    : h("code", { id: "route-candidate" }, route.candidate);
  return h(
    "section",
    { id: "route" },
    h("h2", {}, "Route"),
    h(
      "dl",
      { class: "summary" },
      fact("Candidate", candidate),
      fact("Why", h("span", { id: "route-why", "data-by": route.by }, why(route))),
      fact("Class", h("span", { id: "route-class" }, route.requestClass ?? "–")),
      fact("Features", h("span", { id: "route-features" }, route.features.length ? route.features.join(", ") : "none")),
      fact("Effort", h("span", { id: "route-effort" }, route.effort === null ? "–" : String(route.effort))),
    ),
  );
}

function why(route) {
  if (route.by === "rule") return `rule ${route.rule}: the first of the served model's rules that held`;
  if (route.by === "policy") {
    const measured = route.measuredClass === null ? "every class's measurements" : `class ${route.measuredClass}`;
    return `policy v${route.policy} for ${measured}: expected score ${score(route.expectedScore)}, expected cost ${cost(route.expectedCost, route.unit)}`;
  }
  if (route.by === "explore") {
    const around = route.policy === null ? "" : ` (around policy v${route.policy})`;
    return `explored${around}: a share of the requests no rule decides goes to another candidate, to keep measuring them`;
  }
  if (route.by === "default") return "default: no rule held and no policy chose, so the first candidate";
  return String(route.by);
}

function score(value) {
  return value === null ? "–" : Number(value).toFixed(3);
}

// A cost in the policy's unit: tokens, or a currency (when every measurement had a price).
function cost(value, unit) {
  if (value === null) return "–";
  if (unit === "tokens" || unit === null) return `${Number(value).toLocaleString("en", { maximumFractionDigits: 1 })} tokens`;
  return `${money(Number(value))} ${unit}`;
}
