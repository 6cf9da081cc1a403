// Search: passages of the library with their file, page and scores.

import { allItems, get, json } from "../api.js";
import { errorBox, field, folderChoices, h, replace, select, viewHeader } from "../ui.js";

export async function render(root, { query, signal }) {
  const folders = await allItems("/library/dirs", signal);
  const text = h("input", { type: "search", name: "q", required: true, value: query.get("q") || "", autocomplete: "off" });
  const mode = select("mode", [["hybrid", "Hybrid"], ["keyword", "Keyword"], ["semantic", "Semantic"]], query.get("mode") || "hybrid");
  const limit = h("input", { type: "number", name: "limit", min: 1, max: 100, value: query.get("limit") || "10" });
  const folder = select("dir", [["", "All folders"], ["root", "Top level (root)"], ...folderChoices(folders)], query.get("dir") || "");
  const results = h("section", { "aria-labelledby": "results-title", "aria-live": "polite" });
  const form = h("form", { class: "search-form", role: "search" },
    field("Search the library", text),
    h("div", { class: "row" }, field("Mode", mode), field("Results", limit), field("Folder", folder)),
    h("button", { type: "submit", class: "primary" }, "Search"));

  async function search() {
    const params = new URLSearchParams({ q: text.value, mode: mode.value, limit: limit.value });
    if (folder.value) params.set("dir", folder.value);
    history.replaceState(null, "", `#/search?${params}`);
    replace(results, h("p", { class: "muted" }, "Searching…"));
    try {
      const { hits, note } = await runSearch(text.value, mode.value, Number(limit.value) || 10, folder.value, signal);
      replace(results,
        h("h2", { id: "results-title" }, hits.length ? `${hits.length} passage${hits.length === 1 ? "" : "s"}` : "No passages found"),
        note && h("p", { class: "muted" }, note),
        h("ol", { class: "hits" }, hits.map((hit) => hitItem(hit, text.value))));
    } catch (error) {
      if (!signal.aborted) replace(results, errorBox(error));
    }
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); search(); });
  replace(root, viewHeader("Search"), form, results);
  if (text.value) await search();
}

// POST search (modes, metadata, both scores); an older server has only GET search.
async function runSearch(q, mode, limit, dir, signal) {
  const body = { query: q, limit, mode };
  if (dir) body.dir = dir;
  try {
    return { hits: await json("POST", "/library/search", { body, signal }) };
  } catch (error) {
    if (!error.missingRoute) throw error;
  }
  const hits = await get("/library/search", { query: { q, limit, dir }, signal });
  return { hits, note: "This server searches in hybrid mode only." };
}

function score(value) {
  return typeof value === "number" ? value.toFixed(4) : "–";
}

function hitItem(hit, q) {
  const scores = hit.scores || {};
  return h("li", { class: "hit card" },
    h("div", { class: "hit-head" },
      h("a", { href: `#/files/${encodeURIComponent(hit.fileId)}`, class: "name" }, hit.name),
      hit.page !== null && hit.page !== undefined ? h("span", { class: "page" }, typeof hit.page === "number" ? `page ${hit.page}` : `sheet ${hit.page}`) : null),
    h("p", { class: "passage" }, highlight(hit.chunk || "", q)),
    h("dl", { class: "scores" },
      h("dt", {}, "score"), h("dd", {}, score(hit.score)),
      "keyword" in scores ? [h("dt", {}, "keyword"), h("dd", {}, score(scores.keyword))] : null,
      "semantic" in scores ? [h("dt", {}, "semantic"), h("dd", {}, score(scores.semantic))] : null),
    hit.metadata && Object.keys(hit.metadata).length
      ? h("p", { class: "muted small" }, Object.entries(hit.metadata).map(([k, v]) => `${k}: ${v}`).join(" · ")) : null);
}

// The passage with the query's words marked (as text nodes: the passage is never HTML).
function highlight(text, q) {
  const words = [...new Set(q.toLowerCase().match(/[\p{L}\p{N}]{3,}/gu) || [])];
  if (!words.length) return text;
  const pattern = new RegExp(`(${words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")})`, "giu");
  return text.split(pattern).map((part, i) => (i % 2 ? h("mark", {}, part) : part));
}
