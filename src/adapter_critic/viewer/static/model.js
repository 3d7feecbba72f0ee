// What the views show, read from the runs API's JSON: one place that knows the API's field names.

export function listPage(body) {
  return { runs: body.data || [], nextCursor: body.next_cursor || null };
}

function usageOf(usage) {
  const u = usage || {};
  return { prompt: u.prompt_tokens ?? null, completion: u.completion_tokens ?? null, total: u.total_tokens ?? null };
}

// What a run cost (null: the server had no prices, or the run is going): the total (null when a stage's cost is
// unknown), the known stages' sum and the stages whose cost is unknown.
function runCostOf(cost) {
  if (!cost) return null;
  return { currency: cost.currency, total: cost.total ?? null, totalKnown: cost.total_known ?? 0, unknownStages: cost.unknown_stages || [] };
}

// The OpenAI error envelope the client got, from the stored error (its HTTP status beside it).
function envelopeOf(error) {
  if (!error) return null;
  const { status, ...fields } = error;
  return { status, body: { error: { message: fields.message, type: fields.type, param: fields.param ?? null, code: fields.code ?? null } } };
}

export function runView(run) {
  const error = envelopeOf(run.error);
  const answer = run.answer || {};
  return {
    id: run.id,
    requestId: run.request_id || run.id,
    servedModel: run.served_model,
    mode: run.mode,
    status: run.status,
    degraded: Boolean(run.degraded),
    stream: Boolean(run.stream),
    startedAt: run.started_at,
    finishedAt: run.finished_at || null,
    durationMs: run.duration_ms ?? null,
    tokens: usageOf(run.usage),
    cost: runCostOf(run.cost),
    error,
    errorType: run.error ? run.error.type : null,
    capture: run.capture || "full",
    options: run.request ? run.request.options : null,
    messages: run.request ? run.request.messages ?? null : null,
    intermediate: Object.fromEntries(Object.entries(run.intermediate || {}).filter(([, value]) => value !== null)),
    answer: answer.content ?? null,
    toolCalls: answer.tool_calls ?? null,
    finishReason: answer.finish_reason ?? null,
    stages: labelled((run.stages || []).map(stageView)),
    // A child run (a stage of another run that ran this served model's workflow), and a run's own child runs.
    parentRunId: run.parent_run_id || null,
    parentStage: run.parent_stage || null,
    // A cache hit: the run whose answer it gave (docs/guides/cache.md).
    cachedFrom: run.cached_from || null,
    // The named key ([[auth.keys]]) that made the run (null: none).
    keyName: run.key_name || null,
    // Feedback on the run (`POST /runs/{id}/feedback`), oldest first.
    feedback: (run.feedback || []).map(feedbackView),
    children: (run.children || []).map((child) => ({
      id: child.id,
      servedModel: child.served_model,
      mode: child.mode,
      status: child.status,
      stage: child.parent_stage || "",
      tokens: usageOf(child.usage),
      durationMs: child.duration_ms ?? null,
    })),
    // An auto served model's choice of the candidate that answered (null: not an auto model's run).
    route: routeView(run.intermediate && run.intermediate.route, run.children || []),
    // Its shadow evaluations, oldest first.
    shadows: (run.shadows || []).map(shadowView),
  };
}

// The run's `route` note: the candidate (and the child run that was it: the `api` stage's), why, the request's
// class and features, and the effort; `rule` with by = rule, the policy's expectations with by = policy.
function routeView(route, children) {
  if (!route || typeof route !== "object") return null;
  const child = children.find((found) => found.parent_stage === "api" && found.served_model === route.candidate);
  return {
    candidate: route.candidate,
    by: route.by,
    rule: route.rule ?? null,
    requestClass: route.class ?? null,
    features: route.features || [],
    effort: route.effort ?? null,
    expectedScore: route.expected_score ?? null,
    expectedCost: route.expected_cost ?? null,
    unit: route.unit ?? null,
    policy: route.policy ?? null,
    measuredClass: route.measured_class ?? null,
    childRunId: child ? child.id : null,
  };
}

// One side of a shadow evaluation: its model, its run (the judge's: none, see judgeRuns), tokens, cost and time.
function sideView(side) {
  const found = side || {};
  return { model: found.model || "", runId: found.run_id ?? null, tokens: found.tokens ?? 0, cost: found.cost ?? null, ms: found.ms ?? null };
}

// A shadow evaluation: `outcome` is the candidate's; `votes` the judge's per order (the live answer shown first,
// then the candidate's): "live", "shadow", "tie" or null.
function shadowView(row) {
  const detail = row.detail || {};
  return {
    shadowRunId: row.shadow_run_id,
    candidate: row.candidate,
    outcome: row.outcome,
    requestClass: row.request_class ?? null,
    live: sideView(detail.live),
    shadow: sideView(detail.shadow),
    judge: sideView(detail.judge),
    votes: detail.votes || [],
    judgeRuns: detail.judge_runs || [],
    currency: detail.currency ?? null,
    error: detail.error ?? null,
  };
}

export function feedbackView(entry) {
  return {
    id: entry.id,
    createdAt: entry.created_at,
    score: entry.score,
    label: entry.label ?? null,
    comment: entry.comment ?? null,
    stage: entry.stage ?? null,
    stageIndex: entry.stage_index ?? null,
    verdict: entry.verdict ?? null,
    correctedAnswer: entry.corrected_answer ?? null,
    keyName: entry.key_name ?? null,
    via: entry.via || "api",
  };
}

// A stage called more than once (an adapter asked again, a judge's comparisons) gets its call's number.
function labelled(stages) {
  const total = {};
  for (const stage of stages) total[stage.name] = (total[stage.name] || 0) + 1;
  const seen = {};
  for (const stage of stages) {
    seen[stage.name] = (seen[stage.name] || 0) + 1;
    stage.label = total[stage.name] > 1 ? `${stage.name} #${seen[stage.name]}` : stage.name;
  }
  return stages;
}

function target(model, host) {
  return host ? `${model}@${host}` : model || "";
}

export function stageView(stage) {
  return {
    index: stage.index,
    name: stage.stage,
    target: target(stage.target_model, stage.target_host),
    startMs: stage.started_offset_ms ?? 0,
    durationMs: stage.elapsed_ms ?? 0,
    attempts: (stage.attempts || []).map((attempt) => ({
      target: target(attempt.target_model, attempt.target_host),
      error: attempt.error || null,
    })),
    tokens: usageOf(stage.usage),
    reported: stage.usage_reported !== false,
    cost: stage.cost ? { currency: stage.cost.currency, amount: stage.cost.amount ?? null } : null,
    messages: stage.messages ?? null,
    output: stage.output ?? null,
    error: stage.error || null,
    childRunId: stage.child_run_id || null,
  };
}

// Message content as text: a string as is, content parts joined (text parts' text, others named).
export function contentText(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((part) => (part && part.type === "text" ? part.text : `[${part && part.type}]`)).join("\n");
  }
  return JSON.stringify(content);
}

// An intermediate value that may hold JSON (a panel's lenses, best-of-n's candidates): parsed, else as is.
export function parsed(value) {
  if (typeof value !== "string") return value;
  const trimmed = value.trim();
  if (!trimmed.startsWith("{") && !trimmed.startsWith("[")) return value;
  try {
    return JSON.parse(trimmed);
  } catch {
    return value;
  }
}
