// The console's shell: sign-in, the views' navigation, and a hash router (#/view/id?query).

import { ApiError, json, session } from "./api.js";
import { clearErrorToasts, errorBox, field, h, replace } from "./ui.js";
import * as files from "./views/files.js";
import * as runs from "./views/runs.js";
import * as search from "./views/search.js";
import * as secrets from "./views/secrets.js";
import * as webhooks from "./views/webhooks.js";
import * as workflows from "./views/workflows.js";

const VIEWS = { files, search, workflows, runs, webhooks, secrets };
const main = document.getElementById("main");
let current = null; // the AbortController of the view on screen
let signingIn = false; // a refused key at sign-in is the form's to report

function parseHash() {
  const [path, queryString = ""] = location.hash.replace(/^#\/?/, "").split("?");
  const [view, ...rest] = path.split("/").map(decodeURIComponent);
  return { view: view || "files", id: rest.join("/") || null, query: new URLSearchParams(queryString) };
}

function showChrome(signedIn) {
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("who").hidden = !signedIn;
  document.getElementById("who-project").textContent = signedIn ? session.project : "";
}

async function route(signInMessage) {
  current?.abort();
  current = new AbortController();
  clearErrorToasts();
  if (!session.signedIn) {
    showChrome(false);
    return signIn(signInMessage);
  }
  showChrome(true);
  const { view, id, query } = parseHash();
  const module = VIEWS[view];
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.getAttribute("href") === `#/${view}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (!module) {
    replace(main, h("h1", {}, "Not found"), h("p", {}, "There is no such view. ", h("a", { href: "#/files" }, "Go to files")));
    return;
  }
  document.title = `${view[0].toUpperCase()}${view.slice(1)} · libflow console`;
  replace(main, h("p", { class: "muted" }, "Loading…"));
  const signal = current.signal;
  try {
    await module.render(main, { id, query, signal });
  } catch (error) {
    if (signal.aborted) return;
    replace(main, h("h1", { tabindex: -1 }, "Something went wrong"), errorBox(error));
  }
  if (!signal.aborted) main.querySelector("h1")?.focus({ preventScroll: true });
}

function signIn(message) {
  document.title = "Sign in · libflow console";
  const project = h("input", {
    name: "project", required: true, autocomplete: "username", spellcheck: "false",
    value: new URLSearchParams(location.search).get("project") || localStorage.getItem("libflow.projectId") || "",
  });
  const key = h("input", { name: "key", type: "password", required: true, autocomplete: "current-password", spellcheck: "false" });
  const status = h("div", { "aria-live": "assertive" }, message && errorBox(new Error(message)));
  const button = h("button", { type: "submit", class: "primary" }, "Sign in");
  const form = h("form", { class: "card sign-in", "aria-labelledby": "sign-in-title" },
    h("h1", { id: "sign-in-title", tabindex: -1 }, "Sign in to libflow"),
    h("p", { class: "muted" }, "Use a project's API key (", h("code", {}, "libflow projects create NAME --json"),
      " prints one). It is kept in this tab only, and sent with each call to the API."),
    field("Project ID", project),
    field("API key", key),
    status,
    button);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    replace(status);
    session.save(project.value.trim(), key.value.trim());
    signingIn = true;
    try {
      await json("GET", "/library/dirs"); // any keyed call of the project proves the pair
      key.value = "";
      if (!location.hash || location.hash === "#/") location.hash = "#/files";
      else route();
    } catch (error) {
      session.clear();
      const why = error instanceof ApiError && error.status === 401 ? "Unknown or revoked API key."
        : error instanceof ApiError && error.status === 403 ? "This API key belongs to another project."
          : error instanceof ApiError && error.status === 404 ? "No such project."
            : error.message;
      replace(status, errorBox(new Error(why)));
      key.focus();
    } finally {
      signingIn = false;
      button.disabled = false;
    }
  });
  replace(main, form);
  (project.value ? key : project).focus();
}

window.addEventListener("libflow:unauthorized", () => {
  if (!session.signedIn || signingIn) return;
  session.clear();
  // On the sign-in form itself: a toast would be cleared by the route to it.
  route("Your API key was refused (unknown, or revoked): sign in again.");
});

document.getElementById("sign-out").addEventListener("click", () => {
  session.clear();
  route();
});

window.addEventListener("hashchange", () => route());
route();
