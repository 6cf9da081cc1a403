// Secrets: names and dates only (no route answers a value); set, replace and delete.

import { get, request } from "../api.js";
import { announce, busy, cell, errorBox, field, formatDate, h, replace, tableOf, viewHeader } from "../ui.js";

const NAME = "[A-Za-z_][A-Za-z0-9_]{0,63}";

export async function render(root, { signal }) {
  const secrets = await get("/secrets", { signal });
  const rows = secrets.map((secret) => h("tr", {},
    cell("Name", h("code", {}, secret.name)),
    cell("Created", formatDate(secret.createdDate)),
    cell("Updated", formatDate(secret.updatedDate)),
    cell("", h("button", {
      type: "button",
      class: "small danger",
      "aria-label": `Delete secret ${secret.name}`,
      onclick: (e) => busy(e.currentTarget, async () => {
        if (!window.confirm(`Delete the secret ${secret.name}? Workflows that read it will fail.`)) return;
        await request("DELETE", `/secrets/${encodeURIComponent(secret.name)}`);
        announce(`Secret ${secret.name} deleted`);
        window.dispatchEvent(new HashChangeEvent("hashchange"));
      }),
    }, "Delete"))));
  const name = h("input", { name: "name", required: true, pattern: NAME, maxlength: 64, autocomplete: "off", spellcheck: "false" });
  const value = h("input", { name: "value", type: "password", required: true, autocomplete: "new-password" });
  const status = h("div");
  const form = h("form", {
    class: "card",
    "aria-labelledby": "set-secret",
    onsubmit: async (event) => {
      event.preventDefault();
      replace(status);
      await busy(event.submitter, async () => {
        try {
          await request("PUT", `/secrets/${encodeURIComponent(name.value)}`, { body: { value: value.value } });
          value.value = "";
          announce(`Secret ${name.value} saved`);
          window.dispatchEvent(new HashChangeEvent("hashchange"));
        } catch (error) {
          replace(status, errorBox(error));
        }
      });
    },
  },
  h("h2", { id: "set-secret" }, "Set a secret"),
  h("p", { class: "muted" }, "Workflows read it as ", h("code", {}, "{{ secrets.NAME }}"), ". Saving an existing name replaces its value."),
  h("div", { class: "row" },
    field("Name", name, "letters, digits and _, not starting with a digit"),
    field("Value", value, "never shown again")),
  status,
  h("button", { type: "submit", class: "primary" }, "Save secret"));
  replace(root,
    viewHeader("Secrets"),
    rows.length ? tableOf("Secrets by name", ["Name", "Created", "Updated", ""], rows) : h("p", { class: "muted" }, "No secrets yet."),
    form);
}
