// Files: the list with thumbnails and live processing state, drag-and-drop upload, one
// file's record, metadata and chunks.

import { allItems, get, json, page, request, signedUrl, uploadFile } from "../api.js";
import {
  announce, badge, busy, definitionList, errorBox, errorMessage, field, folderChoices, formatBytes,
  formatDate, h, replace, select, viewHeader,
} from "../ui.js";

const POLL_MS = 1000;
const READS_AT_ONCE = 4;
const PAGE = 100;
const THUMBNAIL_TYPES = /^(image\/|application\/pdf$)/;
const thumbnails = new Map(); // fileId -> object URL of its thumbnail, for this page's life

export async function render(root, { id, query, signal }) {
  if (id) return renderFile(root, id, signal);
  const folder = query.get("dir") || "";
  const folders = await allItems("/library/dirs", signal);
  const list = h("ul", { class: "file-list", "aria-label": "Files" });
  const uploads = h("ul", { class: "uploads", "aria-label": "Uploads" });
  const more = h("div");
  const watcher = new ProcessingWatcher(signal);

  const folderSelect = select("dir", [["", "All folders"], ["root", "Top level (root)"],
    ...folderChoices(folders)], folder);
  folderSelect.addEventListener("change", () => { location.hash = folderSelect.value ? `#/files?dir=${encodeURIComponent(folderSelect.value)}` : "#/files"; });
  const picker = h("input", { type: "file", multiple: true, class: "sr-only", id: "file-picker" });
  picker.addEventListener("change", () => { startUploads([...picker.files]); picker.value = ""; });

  const drop = h("section", { class: "dropzone", "aria-labelledby": "drop-title" },
    h("p", { id: "drop-title" }, h("strong", {}, "Drop files here to upload"), " or "),
    h("label", { for: "file-picker", class: "button primary", tabindex: 0, onkeydown: (e) => {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); picker.click(); }
    } }, "Choose files"),
    picker,
    h("p", { class: "muted small" }, "pdf, docx, pptx, txt, csv, md, html, xlsx and images. ",
      folder && folder !== "root" ? "They go into the folder shown." : "They go into the top level unless a folder is chosen."));

  for (const type of ["dragenter", "dragover"]) {
    root.addEventListener(type, (event) => {
      if (!event.dataTransfer?.types?.includes("Files")) return;
      event.preventDefault();
      drop.classList.add("dragging");
    }, { signal });
  }
  root.addEventListener("dragleave", (event) => {
    if (!root.contains(event.relatedTarget)) drop.classList.remove("dragging");
  }, { signal });
  root.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("dragging");
    startUploads([...(event.dataTransfer?.files || [])]);
  }, { signal });

  function startUploads(chosen) {
    for (const file of chosen) uploadOne(file);
  }

  async function uploadOne(file) {
    const progress = h("progress", { max: 100, value: 0, "aria-label": `Upload of ${file.name}` });
    const state = h("span", { class: "muted" }, "starting");
    const item = h("li", { class: "upload" }, h("span", { class: "name" }, file.name), progress, state);
    uploads.prepend(item);
    try {
      const record = await uploadFile(file, folder && folder !== "" ? folder : "root", (p) => {
        if (p.phase === "uploading" && p.total) {
          progress.value = Math.round((100 * p.loaded) / p.total);
          state.textContent = `${progress.value}%`;
        } else if (p.phase === "finalizing") {
          progress.value = 100;
          state.textContent = "finalizing";
        }
      }, signal);
      item.remove();
      list.querySelector(".empty")?.remove();
      list.prepend(fileRow(record, watcher));
      announce(`${file.name} uploaded; processing`);
    } catch (error) {
      const message = errorMessage(error);
      if (!message) return;
      replace(state, h("span", { class: "error" }, message));
      item.append(h("button", { type: "button", class: "small", onclick: () => item.remove() }, "Dismiss"));
      announce(`${file.name}: ${message}`, "error");
    }
  }

  async function loadPage(url) {
    const result = await page(url, { query: url.startsWith("/library") ? { dir: folder, limit: PAGE } : undefined, signal });
    for (const record of result.items) list.append(fileRow(record, watcher));
    replace(more, result.next && h("button", {
      type: "button",
      onclick: (e) => busy(e.currentTarget, () => loadPage(result.next)),
    }, "Load more files"));
    if (!list.children.length) list.append(h("li", { class: "empty muted" }, "No files yet."));
  }

  replace(root,
    viewHeader("Files", h("div", { class: "toolbar" }, field("Folder", folderSelect),
      ...folderActions(folders.find((f) => f.id === folder)), newFolderForm(folder))),
    drop, uploads, list, more);
  await loadPage("/library/files");
}

// Rename and delete for the folder shown (none for "All folders" and root).
function folderActions(current) {
  if (!current) return [];
  const path = `/library/dirs/${encodeURIComponent(current.id)}`;
  return [
    h("button", {
      type: "button", class: "small", "aria-label": `Rename folder ${current.name}`,
      onclick: (e) => busy(e.currentTarget, async () => {
        const name = window.prompt(`Rename the folder ${current.name} to:`, current.name);
        if (name === null || name.trim() === "" || name.trim() === current.name) return;
        const renamed = await json("PATCH", path, { body: { name } });
        announce(`Folder renamed to ${renamed.name}`);
        window.dispatchEvent(new HashChangeEvent("hashchange"));
      }),
    }, "Rename folder"),
    h("button", {
      type: "button", class: "small danger", "aria-label": `Delete folder ${current.name}`,
      onclick: (e) => busy(e.currentTarget, async () => {
        if (!window.confirm(`Delete the folder ${current.name}? Only an empty folder can go.`)) return;
        await request("DELETE", path);
        announce(`Folder ${current.name} deleted`);
        location.hash = current.parent === "root" ? "#/files?dir=root" : `#/files?dir=${encodeURIComponent(current.parent)}`;
      }),
    }, "Delete folder"),
  ];
}

function newFolderForm(parent) {
  const name = h("input", { name: "name", required: true, maxlength: 255 });
  return h("form", {
    class: "inline",
    onsubmit: async (event) => {
      event.preventDefault();
      const button = event.currentTarget.querySelector("button");
      await busy(button, async () => {
        const created = await json("POST", "/library/dirs", {
          body: { name: name.value, parent: parent && parent !== "" ? parent : "root" },
        });
        announce(`Folder ${created.name} created`);
        location.hash = `#/files?dir=${encodeURIComponent(created.id)}`;
      });
    },
  }, field("New folder", name), h("button", { type: "submit" }, "Create folder"));
}

function statusOf(record) {
  if (record.updating) return badge("processing", record.processing?.status === "pending" ? "queued" : `processing${lastStep(record)}`);
  // A list item says only whether the file is processing: whether it then failed is in
  // its record (GET one), read after the list.
  if (!record.processing) return badge("unknown", "checking");
  if (record.processing.status === "failed") return badge("failed", "failed");
  return badge("done", "ready");
}

function lastStep(record) {
  const steps = Object.entries(record.processing?.steps || {}).sort((a, b) => a[1].localeCompare(b[1]));
  return steps.length ? `: ${steps[steps.length - 1][0]}` : "";
}

function fileRow(record, watcher) {
  const thumb = h("div", { class: "thumb" }, typeIcon(record));
  const status = h("span", { class: "status" }, statusOf(record));
  const meta = h("span", { class: "muted small" });
  const row = h("li", { class: "file", dataset: { fileId: record.id } },
    thumb,
    h("div", { class: "file-main" },
      h("a", { href: `#/files/${encodeURIComponent(record.id)}`, class: "name" }, record.name),
      meta),
    status,
    h("div", { class: "actions" }, fileActions(record, () => {
      const list = row.parentElement;
      row.remove();
      if (list && !list.children.length) list.append(h("li", { class: "empty muted" }, "No files yet."));
    })));
  const show = (current) => {
    replace(meta, `${typeName(current)} · ${formatBytes(current.size)} · `, formatDate(current.createdDate));
    replace(status, statusOf(current));
    if (!current.updating && current.thumbnail !== false && THUMBNAIL_TYPES.test(current.type)) {
      loadThumbnail(current, thumb);
    }
  };
  show(record);
  if (record.updating) watcher.watch(record.id, show);
  else if (!record.processing) watcher.watch(record.id, show, { now: true });
  return row;
}

// The type the file was uploaded as (its MIME type's), not its name's: a rename keeps it.
const TYPE_NAMES = {
  "application/pdf": "PDF",
  "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "DOCX",
  "application/vnd.openxmlformats-officedocument.presentationml.presentation": "PPTX",
  "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "XLSX",
  "text/plain": "TXT",
  "text/csv": "CSV",
  "text/markdown": "MD",
  "text/html": "HTML",
  "image/png": "PNG",
  "image/jpeg": "JPG",
  "image/gif": "GIF",
  "image/webp": "WEBP",
};

function typeName(record) {
  return TYPE_NAMES[record.type] || (record.type || "file").split("/").pop().toUpperCase();
}

function typeIcon(record) {
  return h("span", { class: "type-icon", "aria-hidden": "true" }, typeName(record).slice(0, 4));
}

async function loadThumbnail(record, holder) {
  if (holder.querySelector("img")) return;
  let url = thumbnails.get(record.id);
  if (!url) {
    try {
      const response = await request("GET", `/library/files/${encodeURIComponent(record.id)}/thumbnail`);
      url = URL.createObjectURL(await response.blob());
      thumbnails.set(record.id, url);
    } catch {
      return; // no thumbnail (yet): the type icon stays
    }
  }
  replace(holder, h("img", { src: url, alt: `Thumbnail of ${record.name}`, loading: "lazy" }));
}

// Reads the record of each file listed (whether it failed) and polls the files still
// processing, a few requests at a time, once a second, until they are done.
class ProcessingWatcher {
  constructor(signal) {
    this.signal = signal;
    this.watched = new Map();
    this.timer = null;
    signal.addEventListener("abort", () => clearTimeout(this.timer));
  }

  watch(id, onChange, { now = false } = {}) {
    this.watched.set(id, onChange);
    if (!this.timer) this.schedule(now ? 0 : POLL_MS);
  }

  schedule(delay = POLL_MS) {
    this.timer = setTimeout(() => this.poll(), delay);
  }

  async poll() {
    const waiting = [...this.watched];
    const readNext = async () => {
      for (let next = waiting.shift(); next && !this.signal.aborted; next = waiting.shift()) {
        const [id, onChange] = next;
        try {
          const record = await get(`/library/files/${encodeURIComponent(id)}`, { signal: this.signal });
          onChange(record);
          if (!record.updating) this.watched.delete(id);
        } catch (error) {
          if (error.status === 404) this.watched.delete(id);
        }
      }
    };
    // A page holds up to 100 files: a few at a time stays well inside the rate limit.
    await Promise.all(Array.from({ length: READS_AT_ONCE }, readNext));
    this.timer = null;
    if (this.watched.size && !this.signal.aborted) this.schedule();
  }
}

function fileActions(record, onDeleted) {
  const path = `/library/files/${encodeURIComponent(record.id)}`;
  return [
    h("button", {
      type: "button", class: "small", "aria-label": `Download ${record.name}`,
      onclick: (e) => busy(e.currentTarget, async () => {
        const link = h("a", { href: await signedUrl(`${path}/download`), download: record.name });
        document.body.append(link);
        link.click();
        link.remove();
      }),
    }, "Download"),
    h("button", {
      type: "button", class: "small", "aria-label": `Reprocess ${record.name}`,
      onclick: (e) => busy(e.currentTarget, async () => {
        try {
          await request("POST", `${path}/reprocess`);
          announce(`${record.name} is being processed again`);
          window.dispatchEvent(new HashChangeEvent("hashchange"));
        } catch (error) {
          if (!error.missingRoute) throw error;
          announce("This server cannot reprocess files yet.", "error");
        }
      }),
    }, "Reprocess"),
    h("button", {
      type: "button", class: "small danger", "aria-label": `Delete ${record.name}`,
      onclick: (e) => busy(e.currentTarget, async () => {
        if (!window.confirm(`Delete ${record.name}? Its bytes, thumbnail and passages go too.`)) return;
        await request("DELETE", path);
        announce(`${record.name} deleted`);
        onDeleted();
      }),
    }, "Delete"),
  ];
}

async function renderFile(root, id, signal) {
  const path = `/library/files/${encodeURIComponent(id)}`;
  const record = await get(path, { signal });
  const folder = record.dir === "root" ? null
    : await get(`/library/dirs/${encodeURIComponent(record.dir)}`, { signal }).catch(() => null);
  const thumb = h("div", { class: "thumb large" }, typeIcon(record));
  const facts = h("div");
  const chunks = h("section", { "aria-labelledby": "chunks-title" }, h("h2", { id: "chunks-title" }, "Passages"));
  let processingWhenOpened = Boolean(record.updating);
  const show = (current) => {
    const processing = current.processing || {};
    replace(facts, definitionList([
      ["Status", statusOf(current)],
      ["Error", processing.error],
      ["Warning", processing.warning],
      ["Type", current.type],
      ["Size", formatBytes(current.size)],
      ["Folder", h("a", { href: `#/files?dir=${encodeURIComponent(current.dir)}` },
        current.dir === "root" ? "Top level (root)" : folder?.name ?? current.dir)],
      ["Pages", processing.pages],
      ["Passages", processing.chunks],
      ["Searchable", current.searchable === undefined ? null : current.searchable ? "yes" : "no"],
      ["Uploaded by", [current.uploaderName, current.uploaderEmail].filter(Boolean).join(" · ")],
      ["Created", formatDate(current.createdDate)],
      ["Updated", formatDate(current.updatedDate)],
      ["SHA-256", current.sha256 && h("code", { class: "wrap" }, current.sha256)],
      ["Steps", Object.keys(processing.steps || {}).length ? h("ol", { class: "steps" },
        Object.entries(processing.steps).sort((a, b) => a[1].localeCompare(b[1]))
          .map(([step, at]) => h("li", {}, `${step} `, h("time", { datetime: at, title: at }, new Date(at).toLocaleTimeString())))) : null],
    ]));
    if (!current.updating && current.thumbnail) loadThumbnail(current, thumb);
    if (processingWhenOpened && !current.updating) {
      // Processing ended while the page was open: its passages are new.
      processingWhenOpened = false;
      replace(chunks, h("h2", { id: "chunks-title" }, "Passages"));
      loadChunks(chunks, `${path}/chunks`, signal).catch((error) => chunks.append(errorBox(error)));
    }
  };
  show(record);
  if (record.updating) new ProcessingWatcher(signal).watch(id, show);
  replace(root,
    viewHeader(record.name, h("a", { href: "#/files" }, "All files")),
    h("div", { class: "file-detail" }, thumb, facts),
    h("div", { class: "actions" }, fileActions(record, () => { location.hash = "#/files"; })),
    metadataEditor(path, record),
    chunks);
  await loadChunks(chunks, `${path}/chunks`, signal);
}

function metadataEditor(path, record) {
  const text = h("textarea", { rows: 4, spellcheck: "false", class: "code" }, JSON.stringify(record.metadata || {}, null, 2));
  const status = h("div");
  return h("section", { "aria-labelledby": "metadata-title" },
    h("h2", { id: "metadata-title" }, "Metadata"),
    h("form", {
      onsubmit: async (event) => {
        event.preventDefault();
        replace(status);
        let metadata;
        try {
          metadata = JSON.parse(text.value || "{}");
        } catch (error) {
          replace(status, errorBox(new Error(`not JSON: ${error.message}`)));
          return;
        }
        await busy(event.submitter, async () => {
          try {
            await json("PATCH", path, { body: { metadata } });
            announce("Metadata saved");
          } catch (error) {
            replace(status, errorBox(error.missingRoute ? new Error("This server cannot change metadata yet.") : error));
          }
        });
      },
    },
    field("Metadata (a JSON object of strings, numbers and booleans)", text),
    status,
    h("button", { type: "submit" }, "Save metadata")));
}

async function loadChunks(section, url, signal) {
  let result;
  try {
    result = await page(url, { query: url.includes("?") ? undefined : { limit: 50 }, signal });
  } catch (error) {
    if (error.missingRoute) {
      section.append(h("p", { class: "muted" }, "This server does not list a file's passages."));
      return;
    }
    section.append(errorBox(error));
    return;
  }
  section.querySelector(".more")?.remove();
  let list = section.querySelector("ol");
  if (!list) {
    list = h("ol", { class: "chunks" });
    section.append(list);
  }
  for (const chunk of result.items) {
    list.append(h("li", {},
      h("p", { class: "muted small" }, `#${chunk.index}`, chunk.page !== null && chunk.page !== undefined ? ` · page ${chunk.page}` : "",
        chunk.tokens ? ` · ${chunk.tokens} tokens` : ""),
      h("p", { class: "passage" }, chunk.text)));
  }
  if (!list.children.length) section.append(h("p", { class: "muted" }, "No passages (not processed yet, not a document, or kept out of search)."));
  if (result.next) {
    section.append(h("button", {
      type: "button", class: "more",
      onclick: (e) => busy(e.currentTarget, () => loadChunks(section, result.next, signal)),
    }, "Load more passages"));
  }
}
