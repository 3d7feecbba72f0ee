// What the views show, read from the runs API's JSON: one place that knows the API's field names.

export function listPage(body) {
  return { runs: body.data || [], nextCursor: body.next_cursor || null };
}

function usageOf(usage) {
  const u = usage || {};
  return { prompt: u.prompt_tokens ?? null, completion: u.completion_tokens ?? null, total: u.total_tokens ?? null };
}

function envelopeOf(error) {
  if (!error) return null;
  return error.error ? error : { error };
}

export function runView(run) {
  const error = envelopeOf(run.error);
  return {
    id: run.id,
    servedModel: run.served_model,
    mode: run.mode,
    status: run.status,
    stream: Boolean(run.stream),
    startedAt: run.started_at,
    finishedAt: run.finished_at || null,
    durationMs: run.duration_ms ?? null,
    tokens: usageOf(run.usage),
    error,
    errorType: error && error.error ? error.error.type || null : null,
    request: run.request || null,
    intermediate: run.intermediate || {},
    answer: run.answer ?? (run.intermediate ? run.intermediate.final : null) ?? null,
    capture: run.capture || "full",
    stages: (run.stages || []).map(stageView),
  };
}

export function stageView(stage) {
  return {
    name: stage.stage,
    target: stage.target || "",
    startMs: stage.start_ms ?? 0,
    durationMs: stage.elapsed_ms ?? 0,
    attempts: (stage.attempts || []).map((attempt) => ({
      target: attempt.target || "",
      error: envelopeOf(attempt.error),
    })),
    tokens: usageOf(stage.usage),
    reported: stage.reported !== false,
    messages: stage.messages || null,
    output: stage.output ?? null,
    error: envelopeOf(stage.error),
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
