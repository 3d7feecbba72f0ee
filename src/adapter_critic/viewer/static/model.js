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
