// Small DOM helpers: every text reaches the page as text (never as HTML).

export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "class") element.className = value;
    else if (name === "dataset") Object.assign(element.dataset, value);
    else if (name === "value") element.value = value;
    else if (name === "checked" || name === "selected") element[name] = Boolean(value);
    else element.setAttribute(name, value === true ? "" : value);
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
}

export function replace(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

let nextId = 0;
export const uid = (prefix) => `${prefix}-${++nextId}`;

// A labelled form field: the label names the control for screen readers and clicks.
export function field(label, control, hint) {
  control.id ||= uid("field");
  const hintId = hint ? uid("hint") : null;
  if (hintId) control.setAttribute("aria-describedby", hintId);
  return h("div", { class: "field" },
    h("label", { for: control.id }, label),
    control,
    hint && h("small", { id: hintId, class: "muted" }, hint));
}

export function select(name, options, value) {
  return h("select", { name },
    options.map(([optionValue, text]) => h("option", { value: optionValue, selected: optionValue === value }, text)));
}

// Folders as a select offers them: each by its path ("Reports / 2026 / Q1"), in path order,
// so that nested and same-named folders can be told apart.
export function folderChoices(folders) {
  const byId = new Map(folders.map((folder) => [folder.id, folder]));
  const pathOf = (folder) => {
    const names = [];
    for (let at = folder, depth = 0; at && depth < 64; at = byId.get(at.parent), depth++) names.unshift(at.name);
    return names.join(" / ");
  };
  return folders.map((folder) => [folder.id, pathOf(folder)]).sort((a, b) => a[1].localeCompare(b[1]));
}

export function formatBytes(bytes) {
  if (bytes === null || bytes === undefined) return "";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return `${unit ? value.toFixed(value < 10 ? 1 : 0) : value} ${units[unit]}`;
}

export function formatDate(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return h("time", { datetime: iso, title: iso },
    date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" }));
}

export function formatMs(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "";
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}

export function duration(startIso, endIso) {
  if (!startIso || !endIso) return null;
  return new Date(endIso) - new Date(startIso);
}

// The end of an id: run ids begin with their time, so runs started together share a start.
export const shortId = (id) => (id && id.length > 10 ? `…${id.slice(-8)}` : id);

export function badge(status, text = status) {
  return h("span", { class: `badge badge-${String(status).replace(/[^a-z_]/gi, "")}` }, text);
}

export function jsonBlock(value, label) {
  return h("pre", { class: "json", tabindex: 0, "aria-label": label }, JSON.stringify(value, null, 2));
}

export function definitionList(pairs) {
  return h("dl", { class: "facts" },
    pairs.filter(([, value]) => value !== undefined && value !== null && value !== "")
      .map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

export function errorMessage(error, { withProblems = true } = {}) {
  if (error?.name === "AbortError") return null;
  const code = error?.code ? `${error.code}: ` : "";
  const message = String(error?.message || error);
  const problems = withProblems ? problemsOf(error?.details, message) : [];
  return `${code}${message}${problems.length ? ` (${problems.join("; ")})` : ""}`;
}

// What `details` says of each field, input or node ("metadata.a: must be a string"): the
// message alone may name the fields, not what is wrong with them. Those the message
// already says (a refused body's message names its first problems) are not said twice.
function problemsOf(details, message = "") {
  if (!Array.isArray(details)) return [];
  return details
    .filter((detail) => detail && typeof detail.problem === "string")
    .map((detail) => {
      const name = detail.field ?? detail.input ?? detail.node;
      return name ? `${name}: ${detail.problem}` : detail.problem;
    })
    .filter((problem) => !message.includes(problem));
}

// The error in a line; with `listed`, its problems each on a line of their own below it
// (a definition refused for ten problems).
export function errorBox(error, { listed = false } = {}) {
  const line = h("p", { class: "error", role: "alert" }, errorMessage(error, { withProblems: !listed }));
  if (!listed) return line;
  const problems = problemsOf(error?.details, String(error?.message || ""));
  return h("div", {}, line, problems.length ? h("ul", { class: "error" }, problems.map((p) => h("li", {}, p))) : null);
}

// A short message for everyone: shown, and read out by the live region it is written to.
export function announce(message, kind = "info") {
  const toasts = document.getElementById("toasts");
  // A click takes it away: it may cover the buttons of the rows under it.
  const toast = h("p", { class: `toast toast-${kind}`, title: "Click to dismiss", onclick: () => toast.remove() }, message);
  toasts.append(toast);
  setTimeout(() => toast.remove(), kind === "error" ? 10000 : 5000);
}

// An error said on one view is about that view: it does not follow to the next one.
export function clearErrorToasts() {
  for (const toast of document.querySelectorAll("#toasts .toast-error")) toast.remove();
}

export function copyButton(text, label = "Copy") {
  return h("button", {
    type: "button",
    class: "small",
    onclick: async () => {
      await navigator.clipboard?.writeText(text);
      announce("Copied");
    },
  }, label);
}

export function viewHeader(title, ...extra) {
  return h("div", { class: "view-head" }, h("h1", { tabindex: -1 }, title), ...extra);
}

// Run `work` on a button press, with the button busy meanwhile and errors announced.
export async function busy(button, work) {
  if (!button) return work();
  button.disabled = true;
  button.setAttribute("aria-busy", "true");
  try {
    return await work();
  } catch (error) {
    const message = errorMessage(error);
    if (message) announce(message, "error");
    return undefined;
  } finally {
    button.disabled = false;
    button.removeAttribute("aria-busy");
  }
}

export function tableOf(caption, headers, rows) {
  return h("div", { class: "table-wrap" },
    h("table", {},
      h("caption", { class: "sr-only" }, caption),
      h("thead", {}, h("tr", {}, headers.map((text) => h("th", { scope: "col" }, text)))),
      h("tbody", {}, rows)));
}

export function cell(label, ...content) {
  // data-label: the column's name, shown beside the value when a narrow screen stacks rows.
  return h("td", { "data-label": label }, h("span", {}, ...content));
}
