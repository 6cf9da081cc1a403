// Webhooks: every workflow's webhooks, and one webhook's deliveries with replay.

import { allItems, get, json, request } from "../api.js";
import {
  announce, badge, busy, cell, copyButton, definitionList, errorBox, field, formatDate, h, replace,
  select, shortId, tableOf, viewHeader,
} from "../ui.js";

const CONCURRENCY = 4;

export async function render(root, { id, query, signal }) {
  if (id) return renderWebhook(root, id, signal);
  const workflows = await allItems("/workflows", signal);
  const only = query.get("workflowId");
  const shown = only ? workflows.filter((w) => w.workflowId === only) : workflows;
  const lists = await inBatches(shown, (w) => get(`/workflows/${encodeURIComponent(w.workflowId)}/webhooks`, { signal }));
  const names = new Map(workflows.map((w) => [w.workflowId, w.name]));
  const row = (hook) => h("tr", {},
    cell("Webhook", h("a", { href: `#/webhooks/${encodeURIComponent(hook.webhookId)}`, class: "mono" }, shortId(hook.webhookId))),
    cell("Workflow", h("a", { href: `#/workflows/${encodeURIComponent(hook.workflowId)}` }, names.get(hook.workflowId) || hook.workflowId)),
    cell("Scheme", hook.scheme),
    cell("Event", hook.event),
    cell("Created", formatDate(hook.createdDate)));
  const rows = shown.flatMap((workflow, i) => lists[i].map((hook) => row({ ...hook, workflowId: workflow.workflowId })));
  const list = h("div", {}, rows.length ? tableOf("Webhooks", ["Webhook", "Workflow", "Scheme", "Event", "Created"], rows)
    : h("p", { class: "muted" }, "No webhooks yet."));
  // A new webhook joins the list at once: re-rendering would lose its secret, shown once.
  const added = (hook) => {
    const body = list.querySelector("tbody");
    if (body) body.prepend(row(hook));
    else replace(list, tableOf("Webhooks", ["Webhook", "Workflow", "Scheme", "Event", "Created"], [row(hook)]));
  };
  replace(root,
    viewHeader("Webhooks", only ? h("a", { href: "#/webhooks" }, "All workflows' webhooks") : null),
    list,
    workflows.length ? createForm(workflows, only, added) : h("p", { class: "muted" }, "Create a workflow first: webhooks start its runs."));
}

async function inBatches(items, work) {
  const results = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await work(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, items.length) }, worker));
  return results;
}

function secretNotice(hook) {
  return h("div", { class: "card notice", role: "alert" },
    h("p", {}, h("strong", {}, "Signing secret"), " (shown this once: keep it with the sender)"),
    h("p", {}, h("code", { class: "wrap" }, hook.secret), " ", copyButton(hook.secret, "Copy secret")));
}

function createForm(workflows, only, added) {
  const workflow = select("workflowId", workflows.map((w) => [w.workflowId, w.name]), only || workflows[0].workflowId);
  const scheme = select("scheme", [["standard", "Standard Webhooks"], ["github", "GitHub"], ["stripe", "Stripe"]], "standard");
  const event = h("input", { name: "event", value: "webhook", required: true });
  const status = h("div");
  return h("details", { class: "card" }, h("summary", {}, "New webhook"),
    h("form", {
      onsubmit: async (e) => {
        e.preventDefault();
        replace(status);
        await busy(e.submitter, async () => {
          try {
            const hook = await json("POST", `/workflows/${encodeURIComponent(workflow.value)}/webhooks`, {
              body: { scheme: scheme.value, event: event.value },
            });
            replace(status, secretNotice(hook), h("p", {}, h("a", { href: `#/webhooks/${encodeURIComponent(hook.webhookId)}` }, "Open the new webhook")));
            added(hook);
          } catch (error) {
            replace(status, errorBox(error));
          }
        });
      },
    }, h("div", { class: "row" }, field("Workflow", workflow), field("Signature scheme", scheme), field("Event", event, "the event node its runs start at")),
    h("button", { type: "submit", class: "primary" }, "Create webhook"), status));
}

async function renderWebhook(root, id, signal) {
  const path = `/webhooks/${encodeURIComponent(id)}`;
  const [hook, deliveries] = await Promise.all([get(path, { signal }), get(`${path}/deliveries`, { query: { limit: 100 }, signal })]);
  const workflow = await get(`/workflows/${encodeURIComponent(hook.workflowId)}`, { signal }).catch(() => null);
  const secret = h("div");
  const rows = deliveries.map((delivery) => {
    const replayed = h("span");
    return h("tr", {},
      cell("Received", formatDate(delivery.receivedDate)),
      cell("Sender's id", h("code", { class: "wrap" }, delivery.externalId || "")),
      cell("Status", badge(delivery.status)),
      cell("Attempts", delivery.attempts),
      cell("Run", delivery.runId ? h("a", { href: `#/runs/${encodeURIComponent(delivery.runId)}`, class: "mono" }, shortId(delivery.runId)) : ""),
      cell("Error", delivery.error ? h("span", { class: "error wrap" }, runError(delivery.error)) : ""),
      cell("Replay", h("button", {
        type: "button",
        class: "small",
        "aria-label": `Replay the delivery received ${delivery.receivedDate}`,
        onclick: (e) => busy(e.currentTarget, async () => {
          const run = await json("POST", `${path}/deliveries/${encodeURIComponent(delivery.deliveryId)}/replay`);
          replace(replayed, " → ", h("a", { href: `#/runs/${encodeURIComponent(run.runId)}`, class: "mono replay-run" }, `run ${shortId(run.runId)}`));
          announce(`Replay queued as run ${shortId(run.runId)}`);
        }),
      }, "Replay"), replayed));
  });
  replace(root,
    viewHeader(`Webhook ${shortId(hook.webhookId)}`, h("a", { href: "#/webhooks" }, "All webhooks")),
    definitionList([
      ["URL", [h("code", { class: "wrap" }, hook.url), " ", copyButton(hook.url, "Copy URL")]],
      ["Workflow", h("a", { href: `#/workflows/${encodeURIComponent(hook.workflowId)}` }, workflow?.name || hook.workflowId)],
      ["Scheme", hook.scheme],
      ["Event", hook.event],
      ["Created", formatDate(hook.createdDate)],
    ]),
    h("div", { class: "actions" },
      h("button", {
        type: "button",
        onclick: (e) => busy(e.currentTarget, async () => {
          if (!window.confirm("Issue a new secret? The current one keeps verifying for 24 hours.")) return;
          replace(secret, secretNotice(await json("POST", `${path}/rotate`)));
        }),
      }, "Rotate secret"),
      h("button", {
        type: "button",
        class: "danger",
        onclick: (e) => busy(e.currentTarget, async () => {
          if (!window.confirm("Delete this webhook? Deliveries already accepted still run.")) return;
          await request("DELETE", path);
          announce("Webhook deleted");
          location.hash = "#/webhooks";
        }),
      }, "Delete webhook")),
    secret,
    h("section", { "aria-labelledby": "deliveries-heading" },
      h("h2", { id: "deliveries-heading" }, "Deliveries"),
      rows.length ? tableOf("Deliveries, newest first", ["Received", "Sender's id", "Status", "Attempts", "Run", "Error", "Replay"], rows)
        : h("p", { class: "muted" }, "No deliveries yet.")));
}

// A run's error as the run page says it: "NODE_FAILED in boom: amount too large".
function runError(error) {
  if (typeof error === "string") return error;
  return `${error.code}${error.node ? ` in ${error.node}` : ""}: ${error.message}`;
}
