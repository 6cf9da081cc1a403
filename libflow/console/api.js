// The public API as the console uses it: calls signed with the key of this tab's session.

const KEY = "libflow.apiKey";
const PROJECT = "libflow.projectId";
const RETRIES_WHEN_LIMITED = 3;

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code;
    this.details = details;
  }

  // A route this server does not have yet (an older server): the console says so and goes on.
  get missingRoute() {
    return this.status === 405 || (this.status === 404 && this.message === "no such route");
  }
}

export const session = {
  get key() { return sessionStorage.getItem(KEY); },
  get project() { return sessionStorage.getItem(PROJECT); },
  get signedIn() { return Boolean(this.key && this.project); },
  save(project, key) {
    sessionStorage.setItem(PROJECT, project);
    sessionStorage.setItem(KEY, key);
    localStorage.setItem(PROJECT, project); // not a secret: offered again at the next sign-in
  },
  clear() {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(PROJECT);
  },
};

export function projectPath(path) {
  return `/api/publicv1/projects/${encodeURIComponent(session.project)}${path}`;
}

const wait = (ms, signal) => new Promise((resolve, reject) => {
  const timer = setTimeout(resolve, ms);
  signal?.addEventListener("abort", () => { clearTimeout(timer); reject(signal.reason); }, { once: true });
});

async function errorOf(response) {
  let body = null;
  try { body = await response.json(); } catch { /* not JSON: a proxy's page */ }
  return new ApiError(response.status, body?.error, body?.message, body?.details);
}

// One call; `path` is under the project unless it starts with "/api" or is a full URL.
export async function request(method, path, { body, query, headers = {}, signal } = {}) {
  const target = /^https?:|^\/api\//.test(path) ? path : projectPath(path);
  const url = new URL(target, location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const init = { method, signal, headers: { Authorization: `Bearer ${session.key}`, ...headers } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  for (let attempt = 0; ; attempt++) {
    const response = await fetch(url, init);
    if (response.status === 429 && attempt < RETRIES_WHEN_LIMITED) {
      await wait(1000 * Number(response.headers.get("Retry-After") || 1), signal);
      continue;
    }
    if (response.ok) return response;
    const error = await errorOf(response);
    if (error.status === 401) window.dispatchEvent(new CustomEvent("libflow:unauthorized"));
    throw error;
  }
}

export async function json(method, path, options) {
  const response = await request(method, path, options);
  if (response.status === 204) return null;
  return response.json();
}

export const get = (path, options) => json("GET", path, options);

// A page of a list and where the next one is (the Link header), if there is one.
export async function page(path, options) {
  const response = await request("GET", path, options);
  return { items: await response.json(), next: nextLink(response) };
}

// Every item of a paged list (folders, workflows), up to `most`: a select of more helps
// no one.
export async function allItems(path, signal, most = 10_000) {
  const items = [];
  let next = path;
  while (next && items.length < most) {
    const result = await page(next, { signal });
    items.push(...result.items);
    next = result.next;
  }
  return items;
}

export function nextLink(response) {
  const header = response.headers.get("Link") || "";
  const match = header.match(/<([^>]+)>\s*;\s*rel="?next"?/);
  if (!match) return null;
  // Its path and query only, called on this page's origin: behind a proxy the server may
  // name another scheme or host, and the key goes to no origin but the console's own.
  const next = new URL(match[1], location.origin);
  return next.pathname + next.search;
}

// The signed URL a redirecting route (download, thumbnail) answers, without reading the bytes.
export async function signedUrl(path) {
  const controller = new AbortController();
  const response = await request("GET", path, { signal: controller.signal });
  controller.abort();
  return response.url;
}

// Create, PUT (with progress) and finalize: the library's three-step upload.
export async function uploadFile(file, folder, onProgress, signal) {
  const extension = file.name.includes(".") ? file.name.split(".").pop().toLowerCase() : "";
  if (!extension) {
    // The file's type is its extension's: without one there is nothing to ask the server.
    throw new ApiError(0, "UNSUPPORTED_FILE_TYPE",
      `${file.name} has no extension to tell its type: rename it (.pdf, .docx, .txt, ...) and upload it again`);
  }
  const created = await json("POST", "/library/files", {
    body: { originalname: file.name, fileType: extension, dir: folder || "root" },
    signal,
  });
  onProgress({ phase: "uploading", loaded: 0, total: file.size, created });
  await putBytes(created.storageLink, file, created.mimeType, onProgress, signal);
  onProgress({ phase: "finalizing", loaded: file.size, total: file.size, created });
  return json("POST", "/library/files:complete", { body: { path: created.path }, signal });
}

function putBytes(url, file, contentType, onProgress, signal) {
  // XMLHttpRequest, not fetch: only it reports upload progress.
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", url);
    xhr.setRequestHeader("Content-Type", contentType);
    xhr.upload.onprogress = (event) => onProgress({ phase: "uploading", loaded: event.loaded, total: event.total });
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) return resolve();
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch { /* S3 answers XML */ }
      reject(new ApiError(xhr.status, body?.error, body?.message || `the upload was refused (HTTP ${xhr.status})`));
    };
    xhr.onerror = () => reject(new ApiError(0, "NETWORK", "the upload could not reach the storage"));
    xhr.onabort = () => reject(new DOMException("upload cancelled", "AbortError"));
    signal?.addEventListener("abort", () => xhr.abort(), { once: true });
    xhr.send(file);
  });
}

// Server-sent events of a fetch response, as {id, name, data} with data parsed as JSON.
export async function* readEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = { id: null, name: "message", data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    const lines = buffer.split("\n");
    buffer = lines.pop();
    for (const raw of lines) {
      const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
      if (line === "") {
        if (event.data.length) yield { id: event.id, name: event.name, data: parseData(event.data.join("\n")) };
        event = { id: event.id, name: "message", data: [] };
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event.name = text;
        else if (field === "data") event.data.push(text);
        else if (field === "id") event.id = text;
      }
    }
  }
}

function parseData(text) {
  try { return JSON.parse(text); } catch { return text; }
}

// Every event of a run until run.finished, reconnecting with Last-Event-ID if the stream
// breaks; `first` is a response already streaming them (runsync), if any.
export async function* runEvents(runId, { first = null, signal } = {}) {
  let lastId = null;
  let currentRun = runId;
  let response = first;
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      if (!response) {
        const headers = { Accept: "text/event-stream" };
        if (lastId) headers["Last-Event-ID"] = lastId;
        response = await request("GET", `/runs/${encodeURIComponent(currentRun)}/events`, { headers, signal });
      }
      for await (const event of readEvents(response)) {
        if (event.id) lastId = event.id;
        if (event.name === "run.started" && event.data?.runId) currentRun = event.data.runId;
        attempt = 0;
        yield event;
        if (event.name === "run.finished") return;
      }
    } catch (error) {
      // A refusal is final; a server error or the rate limiter (a restart, a moment of
      // overload) is waited out like a broken stream, within the same attempts.
      const passing = error instanceof ApiError && (error.status >= 500 || error.status === 429);
      if (signal?.aborted || (error instanceof ApiError && !passing)) throw error;
    }
    response = null;
    if (!currentRun) throw new ApiError(0, "NETWORK", "the run's event stream broke before it started");
    await wait(1000, signal);
  }
  throw new ApiError(0, "NETWORK", "the run's event stream keeps breaking");
}
