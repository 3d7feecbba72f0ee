// Calls to this server's runs API, with the API key (when the server asks for one) from this tab's
// session storage; a 401 asks the user for a key and retries.

const KEY = "adapter_critic.api_key";

export const root = document.querySelector('meta[name="adapter-critic-root"]').getAttribute("content");

export class ApiError extends Error {
  constructor(status, envelope, message) {
    super(message);
    this.status = status;
    this.envelope = envelope;
  }
}

let askForKey = null;

// `ask(message)` shows the key dialog and resolves once the user gave a key.
export function onKeyNeeded(ask) {
  askForKey = ask;
}

export function hasKey() {
  return sessionStorage.getItem(KEY) !== null;
}

export function setKey(key) {
  sessionStorage.setItem(KEY, key);
}

export function forgetKey() {
  sessionStorage.removeItem(KEY);
}

function headers() {
  const key = sessionStorage.getItem(KEY);
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// GET `${root}${path}` with `params` (empty values left out), as JSON.
export async function get(path, params) {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined && value !== "") query.set(name, value);
  }
  return call(`${root}${path}${query.size ? `?${query}` : ""}`, { headers: headers(), cache: "no-store", credentials: "omit" });
}

// POST `data` as JSON to `${root}${path}`; the answer as JSON.
export async function post(path, data) {
  const init = () => ({ method: "POST", headers: { ...headers(), "Content-Type": "application/json" }, body: JSON.stringify(data), credentials: "omit" });
  return call(`${root}${path}`, init);
}

// `init`: fetch's options, or a function making them (read again after a key was asked for).
async function call(url, init) {
  for (;;) {
    const response = await fetch(url, typeof init === "function" ? init() : { ...init, headers: headers() });
    if (response.status === 401 && askForKey) {
      const envelope = await body(response);
      await askForKey(hasKey() ? "That key was refused." : null, envelope);
      continue;
    }
    if (!response.ok) {
      const envelope = await body(response);
      const message = envelope && envelope.error && envelope.error.message;
      throw new ApiError(response.status, envelope, message || `${response.status} ${response.statusText}`);
    }
    return response.json();
  }
}

async function body(response) {
  try {
    return await response.json();
  } catch {
    return null;
  }
}
