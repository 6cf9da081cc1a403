// Runs: the list with its filters, and one run with its node timings (live while it runs).

import { allItems, get, page, request, runEvents } from "../api.js";
import {
  announce, badge, busy, cell, definitionList, duration, errorBox, field, formatDate, formatMs,
  h, jsonBlock, replace, select, shortId, tableOf, viewHeader,
} from "../ui.js";

const STATUSES = ["queued", "running", "succeeded", "failed", "timed_out", "cancelled"];
const TRIGGERS = ["api", "api_async", "webhook", "replay", "schedule", "call"];
const FILTERS = ["workflowId", "status", "trigger", "version", "startedAfter", "startedBefore"];
const PAGE = 50;

export async function render(root, { id, query, signal }) {
  if (id) return renderRun(root, id, signal);
  const workflows = await allItems("/workflows", signal);
  const names = new Map(workflows.map((w) => [w.workflowId, w.name]));
  const filters = Object.fromEntries(FILTERS.map((name) => [name, query.get(name) || ""]));
  const form = filterForm(filters, workflows);
  const body = h("tbody");
  const more = h("div");
  const table = h("div", { class: "table-wrap" }, h("table", {},
    h("caption", { class: "sr-only" }, "Runs, newest first"),
    h("thead", {}, h("tr", {}, ["Run", "Workflow", "Version", "Trigger", "Status", "Started", "Duration"].map((t) => h("th", { scope: "col" }, t)))),
    body));

  async function load(url, queryParams) {
    const result = await page(url, { query: queryParams, signal });
    for (const run of result.items) {
      body.append(h("tr", {},
        cell("Run", h("a", { href: `#/runs/${encodeURIComponent(run.runId)}`, class: "mono" }, shortId(run.runId))),
        cell("Workflow", h("a", { href: `#/workflows/${encodeURIComponent(run.workflowId)}` }, names.get(run.workflowId) || shortId(run.workflowId))),
        cell("Version", run.version),
        cell("Trigger", run.trigger),
        cell("Status", badge(run.status)),
        cell("Started", formatDate(run.startedDate)),
        cell("Duration", formatMs(duration(run.startedDate, run.finishedDate)))));
    }
    replace(more, result.next && h("button", { type: "button", onclick: (e) => busy(e.currentTarget, () => load(result.next)) }, "Load more runs"));
    if (!body.children.length) body.append(h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No runs match.")));
  }

  replace(root, viewHeader("Runs"), form, table, more);
  const params = { ...filters, limit: PAGE };
  for (const name of ["startedAfter", "startedBefore"]) {
    if (params[name]) params[name] = new Date(params[name]).toISOString(); // local time in the form
  }
  try {
    await load("/runs", params);
  } catch (error) {
    if (!signal.aborted) table.after(errorBox(error));
  }
}

function filterForm(filters, workflows) {
  const workflow = select("workflowId", [["", "Any workflow"], ...workflows.map((w) => [w.workflowId, w.name])], filters.workflowId);
  const status = select("status", [["", "Any status"], ...STATUSES.map((s) => [s, s])], filters.status);
  const trigger = select("trigger", [["", "Any trigger"], ...TRIGGERS.map((t) => [t, t])], filters.trigger);
  const version = h("input", { name: "version", type: "number", min: 1, value: filters.version });
  const after = h("input", { name: "startedAfter", type: "datetime-local", step: 1, value: filters.startedAfter });
  const before = h("input", { name: "startedBefore", type: "datetime-local", step: 1, value: filters.startedBefore });
  return h("form", {
    class: "card filters",
    "aria-label": "Filter runs",
    onsubmit: (event) => {
      event.preventDefault();
      const params = new URLSearchParams();
      for (const control of event.currentTarget.elements) {
        if (control.name && control.value) params.set(control.name, control.value);
      }
      location.hash = `#/runs?${params}`;
    },
  },
  h("div", { class: "row" }, field("Workflow", workflow), field("Status", status), field("Trigger", trigger),
    field("Version", version), field("Started after", after), field("Started before", before)),
  h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Apply filters"),
    h("a", { href: "#/runs", class: "button" }, "Clear")));
}

async function renderRun(root, id, signal) {
  const path = `/runs/${encodeURIComponent(id)}`;
  const show = async (run) => {
    const workflow = await get(`/workflows/${encodeURIComponent(run.workflowId)}`, { signal }).catch(() => null);
    const cancel = ["queued", "running"].includes(run.status) && h("button", {
      type: "button",
      class: "danger",
      onclick: (e) => busy(e.currentTarget, async () => {
        await request("POST", `${path}/cancel`);
        announce("Cancelling the run");
      }),
    }, "Cancel run");
    replace(root,
      viewHeader(`Run ${shortId(run.runId)}`, h("a", { href: "#/runs" }, "All runs")),
      h("p", { class: "run-status" }, "Status: ", badge(run.status), " ", cancel),
      definitionList([
        ["Run", h("code", { class: "wrap" }, run.runId)],
        ["Workflow", h("a", { href: `#/workflows/${encodeURIComponent(run.workflowId)}` }, workflow?.name || run.workflowId)],
        ["Version", run.version],
        ["Event", run.event],
        ["Trigger", run.trigger],
        ["Status code", run.statusCode],
        ["Parent run", run.parentRunId && h("a", { href: `#/runs/${encodeURIComponent(run.parentRunId)}` }, shortId(run.parentRunId))],
        ["Started", formatDate(run.startedDate)],
        ["Finished", formatDate(run.finishedDate)],
        ["Duration", formatMs(duration(run.startedDate, run.finishedDate))],
      ]),
      run.error && h("section", { "aria-labelledby": "error-heading" }, h("h2", { id: "error-heading" }, "Error"),
        h("p", { class: "error" }, `${run.error.code}${run.error.node ? ` in ${run.error.node}` : ""}: ${run.error.message}`)),
      timings(run),
      h("section", { "aria-labelledby": "outputs-heading" }, h("h2", { id: "outputs-heading" }, "Outputs"), jsonBlock(run.outputs ?? {}, "Outputs")),
      h("section", { "aria-labelledby": "inputs-heading" }, h("h2", { id: "inputs-heading" }, "Inputs"), jsonBlock(run.inputs ?? {}, "Inputs")));
  };
  const run = await get(path, { signal });
  await show(run);
  if (!["queued", "running"].includes(run.status)) return;
  // Live: the record is shown again as nodes end, and once more when the run does.
  for await (const event of runEvents(id, { signal })) {
    if (event.name === "run.finished") await show(event.data);
    else if (["node.finished", "node.failed", "run.started"].includes(event.name)) await show(await get(path, { signal }));
  }
}

function timings(run) {
  const entries = Object.entries(run.nodeTimings || {})
    .map(([node, t]) => ({ node, ...t, start: new Date(t.startedDate), end: t.finishedDate ? new Date(t.finishedDate) : null }))
    .sort((a, b) => a.start - b.start);
  if (!entries.length) return h("section", {}, h("h2", {}, "Node timings"), h("p", { class: "muted" }, "No node has run."));
  const origin = Math.min(...entries.map((e) => e.start));
  const last = Math.max(...entries.map((e) => (e.end || e.start).getTime()));
  const span = Math.max(1, last - origin);
  const withTokens = entries.some((e) => e.usage); // only nodes that called a model have any
  const rows = entries.map((e) => {
    const ms = e.end ? e.end - e.start : null;
    const bar = h("span", { class: `bar bar-${e.status}` });
    bar.style.left = `${(100 * (e.start - origin)) / span}%`;
    bar.style.width = `max(2px, ${(100 * ((e.end || e.start) - e.start)) / span}%)`;
    return h("tr", {},
      cell("Node", h("code", {}, e.node)),
      cell("Status", badge(e.status)),
      cell("Starts at", `+${formatMs(e.start - origin)}`),
      cell("Took", ms === null ? "" : formatMs(ms)),
      cell("Timeline", h("span", { class: "track", "aria-hidden": "true" }, bar)),
      withTokens && cell("Tokens", e.usage ? `${e.usage.promptTokens ?? 0} + ${e.usage.completionTokens ?? 0}` : ""));
  });
  return h("section", { "aria-labelledby": "timings-heading" },
    h("h2", { id: "timings-heading" }, "Node timings"),
    tableOf("Node timings, in the order the nodes started", ["Node", "Status", "Starts at", "Took", "Timeline", withTokens && "Tokens (prompt + completion)"].filter(Boolean), rows));
}
