// Workflows: the list, one workflow's graph, versions and definition, and a run form whose
// run streams in live (runsync with Accept: text/event-stream).

import { allItems, get, json, request, runEvents } from "../api.js";
import { clearStates, drawGraph, setNodeState } from "../graph.js";
import {
  announce, badge, busy, cell, errorBox, field, formatDate, formatMs, h, jsonBlock, replace,
  select, shortId, tableOf, viewHeader,
} from "../ui.js";

// A node's status in a finished run's timings -> its look on the graph.
const NODE_STATES = { succeeded: "done", failed: "failed", cancelled: "cancelled", timed_out: "failed", skipped: "skipped" };

const EXAMPLE = {
  timeoutSeconds: 30,
  nodes: [
    { id: "start", type: "event", event: "run" },
    { id: "who", type: "input", name: "name", valueType: "string", required: true },
    { id: "greet", type: "template", template: "Hello, {{ inputs.name }}!" },
    { id: "out", type: "set_output", name: "greeting", value: "{{ nodes.greet.text }}" },
  ],
  edges: [{ from: "start", to: "greet" }, { from: "greet", to: "out" }],
};

export async function render(root, { id, query, signal }) {
  if (id) return renderWorkflow(root, id, query.get("version"), signal);
  const workflows = await allItems("/workflows", signal);
  const rows = workflows.map((w) => h("tr", {},
    cell("Name", h("a", { href: `#/workflows/${encodeURIComponent(w.workflowId)}` }, w.name)),
    cell("Version", w.version),
    cell("Updated", formatDate(w.updatedDate || w.createdDate)),
    cell("Runs", h("a", { href: `#/runs?workflowId=${encodeURIComponent(w.workflowId)}` }, "Runs"))));
  replace(root,
    viewHeader("Workflows"),
    workflows.length ? tableOf("Workflows", ["Name", "Latest version", "Updated", ""], rows)
      : h("p", { class: "muted" }, "No workflows yet."),
    createForm());
}

function definitionInput(value) {
  return h("textarea", { rows: 14, spellcheck: "false", class: "code", required: true }, JSON.stringify(value, null, 2));
}

function parseDefinition(textarea, status) {
  try {
    return JSON.parse(textarea.value);
  } catch (error) {
    replace(status, errorBox(new Error(`the definition is not JSON: ${error.message}`)));
    return null;
  }
}

function createForm() {
  const name = h("input", { name: "name", required: true, maxlength: 200 });
  const definition = definitionInput(EXAMPLE);
  const status = h("div");
  return h("details", { class: "card" }, h("summary", {}, "New workflow"),
    h("form", {
      onsubmit: async (event) => {
        event.preventDefault();
        replace(status);
        const parsed = parseDefinition(definition, status);
        if (!parsed) return;
        // Busy while it is sent: a double click made two workflows.
        await busy(event.submitter, async () => {
          try {
            const created = await json("POST", "/workflows", { body: { name: name.value, definition: parsed } });
            location.hash = `#/workflows/${encodeURIComponent(created.workflowId)}`;
          } catch (error) {
            replace(status, errorBox(error, { listed: true }));
          }
        });
      },
    }, field("Name", name), field("Definition (JSON)", definition), status,
    h("button", { type: "submit", class: "primary" }, "Create workflow")));
}

// `chosen`: a version to show and run other than the latest (?version=N): its graph, its
// inputs and its definition, read as it was published.
async function renderWorkflow(root, id, chosen, signal) {
  const path = `/workflows/${encodeURIComponent(id)}`;
  const latest = await get(path, { signal });
  const shown = chosen && chosen !== latest.version
    ? await get(`${path}/versions/${encodeURIComponent(chosen)}`, { signal }).catch((error) => {
      if (error.status === 404) return null; // a version it does not have: the latest
      throw error;
    })
    : null;
  const workflow = shown ? { ...latest, version: shown.version, definition: shown.definition } : latest;
  const definition = workflow.definition || {};
  const graph = drawGraph(definition, `Graph of ${workflow.name}, version ${workflow.version}`);
  replace(root,
    viewHeader(workflow.name,
      h("p", { class: "muted" }, `Version ${workflow.version}${shown ? ` (the latest is ${latest.version})` : ""} · `,
        h("code", {}, workflow.workflowId), " · ",
        h("a", { href: `#/runs?workflowId=${encodeURIComponent(id)}` }, "Runs"), " · ",
        h("a", { href: `#/webhooks?workflowId=${encodeURIComponent(id)}` }, "Webhooks"))),
    h("div", { class: "workflow-grid" },
      h("section", { "aria-labelledby": "graph-heading", class: "card" },
        h("h2", { id: "graph-heading" }, "Graph"), h("div", { class: "graph-wrap" }, graph)),
      runPanel(id, workflow, graph, signal)),
    versionsSection(path, latest, workflow.version),
    h("section", { "aria-labelledby": "definition-heading" },
      h("h2", { id: "definition-heading" }, `Definition (version ${workflow.version})`),
      jsonBlock(definition, "Definition")));
}

function inputControl(node) {
  const attrs = { name: node.name, required: Boolean(node.required) };
  const fallback = node.default ?? "";
  switch (node.valueType) {
    case "number": return h("input", { ...attrs, type: "number", step: "any", value: fallback });
    case "boolean": return h("input", { ...attrs, required: false, type: "checkbox", checked: Boolean(node.default) });
    case "object":
    case "array": return h("textarea", { ...attrs, rows: 3, class: "code" }, node.default === undefined || node.default === null ? "" : JSON.stringify(node.default));
    default: return h("input", { ...attrs, value: fallback });
  }
}

function readInput(node, control) {
  if (node.valueType === "boolean") return control.checked;
  if (control.value === "") return undefined;
  if (node.valueType === "number") return Number(control.value);
  if (node.valueType === "object" || node.valueType === "array") return JSON.parse(control.value);
  return control.value;
}

function runPanel(workflowId, workflow, graph, viewSignal) {
  const nodes = workflow.definition?.nodes || [];
  const events = [...new Set(nodes.filter((n) => n.type === "event").map((n) => n.event))];
  const inputs = nodes.filter((n) => n.type === "input").map((node) => [node, inputControl(node)]);
  const eventSelect = select("runEvent", events.map((e) => [e, e]), events[0]);
  const versionSelect = select("version", [...(workflow.versions || [])].reverse().map((v) => [v.version, `version ${v.version}`]), workflow.version);
  // Another version has other inputs and another graph: the view shows that version.
  versionSelect.addEventListener("change", () => {
    location.hash = `#/workflows/${encodeURIComponent(workflowId)}?version=${encodeURIComponent(versionSelect.value)}`;
  });
  const status = h("p", { id: "run-status", class: "run-status" }, "Not run yet.");
  const outputs = h("dl", { id: "run-outputs", class: "facts outputs", "aria-label": "Outputs" });
  const log = h("ol", { class: "event-log", "aria-label": "Run events" });
  const runButton = h("button", { type: "submit", class: "primary" }, "Run");
  const cancelButton = h("button", { type: "button", disabled: true }, "Cancel run");
  const problem = h("div");
  let runId = null;
  let controller = null;

  cancelButton.addEventListener("click", () => busy(cancelButton, async () => {
    await request("POST", `/runs/${encodeURIComponent(runId)}/cancel`);
    announce("Cancelling the run");
  }));

  const setStatus = (state, extra) => replace(status, "Status: ", badge(state), extra ? ` ${extra}` : "",
    runId ? [" · ", h("a", { href: `#/runs/${encodeURIComponent(runId)}` }, `run ${shortId(runId)}`)] : "");
  const showOutput = (name, value) => {
    let entry = [...outputs.querySelectorAll("dt")].find((dt) => dt.textContent === name);
    if (!entry) {
      entry = h("dt", {}, name);
      outputs.append(entry, h("dd", {}));
    }
    replace(entry.nextElementSibling, typeof value === "string" ? value : jsonBlock(value, `Output ${name}`));
  };
  const note = (text, kind = "") => log.append(h("li", { class: kind }, text));

  function handle(event) {
    const data = event.data || {};
    switch (event.name) {
      case "run.queued":
      case "run.started":
        if (data.runId) runId = data.runId;
        cancelButton.disabled = !runId;
        setStatus("running");
        break;
      case "node.started":
        setNodeState(graph, data.node, "running", "…");
        note(`${data.node} started`);
        break;
      case "node.finished":
        setNodeState(graph, data.node, "done", formatMs(data.ms));
        note(`${data.node} finished in ${formatMs(data.ms)}`);
        break;
      case "node.failed":
        setNodeState(graph, data.node, "failed", "failed");
        note(`${data.node} failed: ${data.error?.message || JSON.stringify(data.error)}`, "error");
        break;
      case "output":
        showOutput(data.name, data.value);
        note(`output ${data.name}`);
        break;
      case "llm.delta": {
        let stream = log.querySelector(`[data-llm="${CSS.escape(data.node)}"]`);
        if (!stream) {
          stream = h("li", { dataset: { llm: data.node } }, `${data.node}: `);
          log.append(stream);
        }
        stream.append(data.text);
        break;
      }
      case "run.finished":
        runId = data.runId || runId;
        for (const [node, timing] of Object.entries(data.nodeTimings || {})) {
          const ms = timing.finishedDate ? new Date(timing.finishedDate) - new Date(timing.startedDate) : null;
          setNodeState(graph, node, NODE_STATES[timing.status] || null, timing.status === "succeeded" ? formatMs(ms) : timing.status);
        }
        for (const [name, value] of Object.entries(data.outputs || {})) showOutput(name, value);
        setStatus(data.status, data.error ? `· ${data.error.code}: ${data.error.message}` : "");
        note(`run ${data.status}`);
        announce(`Run ${data.status}`);
        break;
      default:
        break;
    }
  }

  const form = h("form", {
    class: "card run-form",
    "aria-labelledby": "run-heading",
    onsubmit: async (event) => {
      event.preventDefault();
      replace(problem);
      const body = { inputs: {}, runEvent: eventSelect.value || undefined, version: versionSelect.value || undefined };
      try {
        for (const [node, control] of inputs) {
          const value = readInput(node, control);
          if (value !== undefined) body.inputs[node.name] = value;
        }
      } catch (error) {
        replace(problem, errorBox(new Error(`an input is not JSON: ${error.message}`)));
        return;
      }
      controller?.abort();
      controller = new AbortController();
      viewSignal.addEventListener("abort", () => controller.abort(), { once: true });
      runId = null;
      clearStates(graph);
      replace(outputs);
      replace(log);
      setStatus("starting");
      runButton.disabled = true;
      try {
        const response = await request("POST", `/workflows/${encodeURIComponent(workflowId)}/runsync`, {
          body, headers: { Accept: "text/event-stream" }, signal: controller.signal,
        });
        if (!(response.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
          const result = await response.json(); // a server without streamed runs
          handle({ name: "run.finished", data: { status: result.success ? "succeeded" : "failed", outputs: result.result?.outputs, error: result.result?.error } });
        } else {
          for await (const event of runEvents(null, { first: response, signal: controller.signal })) handle(event);
        }
      } catch (error) {
        if (controller.signal.aborted) return;
        setStatus("failed");
        replace(problem, errorBox(error, { listed: true }));
      } finally {
        runButton.disabled = false;
        cancelButton.disabled = true;
      }
    },
  },
  h("h2", { id: "run-heading" }, "Run"),
  h("div", { class: "row" },
    events.length > 1 ? field("Event", eventSelect) : null,
    field("Version", versionSelect)),
  inputs.map(([node, control]) => field(`${node.name}${node.required ? " (required)" : ""}`, control, node.valueType)),
  problem,
  h("div", { class: "actions" }, runButton, cancelButton),
  status,
  h("h3", {}, "Outputs"), outputs,
  h("details", { open: true }, h("summary", {}, "Events"), log));
  return form;
}

function versionsSection(path, workflow, shownVersion) {
  const definition = definitionInput(workflow.definition || EXAMPLE);
  const status = h("div");
  const versions = [...(workflow.versions || [])].reverse();
  const link = (v) => (v.version === shownVersion ? h("strong", {}, v.version)
    : h("a", { href: `#/workflows/${encodeURIComponent(workflow.workflowId)}?version=${encodeURIComponent(v.version)}` }, v.version));
  return h("section", { "aria-labelledby": "versions-heading" },
    h("h2", { id: "versions-heading" }, "Versions"),
    tableOf("Versions", ["Version", "Published"], versions.map((v) => h("tr", {},
      cell("Version", v.version === workflow.version ? [link(v), " ", badge("done", "latest")] : link(v)),
      cell("Published", formatDate(v.createdDate))))),
    h("details", { class: "card" }, h("summary", {}, "Publish a new version"),
      h("form", {
        onsubmit: async (event) => {
          event.preventDefault();
          replace(status);
          const parsed = parseDefinition(definition, status);
          if (!parsed) return;
          await busy(event.submitter, async () => {
            try {
              const published = await json("POST", `${path}/versions`, { body: { definition: parsed } });
              announce(`Version ${published.version} published`);
              window.dispatchEvent(new HashChangeEvent("hashchange"));
            } catch (error) {
              replace(status, errorBox(error, { listed: true }));
            }
          });
        },
      }, field("Definition (JSON)", definition), status,
      h("button", { type: "submit", class: "primary" }, "Publish version"))));
}
