"""The web console in Chromium: each view used as a person would, through the public API.

One server (embedded shape) and one browser serve the module; each test has a tab of its
own. Every wait is on a condition the page shows (Playwright's expect), never a sleep.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import fixture_bytes
from tests.console.conftest import DESKTOP, PHONE, Console
from tests.faults.processes import http_json, wait_for
from tests.webhook_helpers import standard_headers

PROCESSING_TIMEOUT_MS = 60_000


def sign_in(page: Page, console: Console, hash_path: str = "#/files") -> None:
    """Open the console, sign in with the project's key and land on ``hash_path``."""
    page.goto(console.url + hash_path)
    page.get_by_label("Project ID").fill(console.project_id)
    page.get_by_label("API key").fill(console.api_key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("navigation", name="Views")).to_be_visible()


def call(console: Console, method: str, path: str, body: Any = None) -> Any:
    """A call of the project's API with its key; the answer must be a success."""
    status, answer = http_json(method, console.api(path), body, **console.headers)
    assert status < 300, (status, answer)
    return answer


def upload(console: Console, name: str, data: bytes, file_type: str) -> str:
    """The three upload steps through the API; the file's id."""
    created = call(
        console,
        "POST",
        "/library/files",
        {"originalname": name, "fileType": file_type, "dir": "root"},
    )
    put = urllib.request.Request(
        created["storageLink"],
        data=data,
        method="PUT",
        headers={"Content-Type": created["mimeType"]},
    )
    with urllib.request.urlopen(put, timeout=30) as reply:
        assert reply.status == 200
    call(console, "POST", "/library/files:complete", {"path": created["path"]})
    return str(created["documentId"])


def processed(console: Console, file_id: str) -> dict[str, Any]:
    """The file's record once processing has ended."""

    def done() -> dict[str, Any] | None:
        record: dict[str, Any] = call(console, "GET", f"/library/files/{file_id}")
        return record if record["updating"] is None else None

    return wait_for(done, 60, f"file {file_id} was not processed")


def create_workflow(console: Console, name: str, definition: dict[str, Any]) -> str:
    """A workflow of the project; its id."""
    created = call(console, "POST", "/workflows", {"name": name, "definition": definition})
    return str(created["workflowId"])


def drop_files(page: Page, selector: str, files: dict[str, tuple[bytes, str]]) -> None:
    """Drag files from outside the page and drop them on ``selector`` (as a desktop does)."""
    encoded = {
        name: [base64.b64encode(data).decode(), kind] for name, (data, kind) in files.items()
    }
    transfer = page.evaluate_handle(
        """(files) => {
            const transfer = new DataTransfer();
            for (const [name, [b64, type]] of Object.entries(files)) {
                const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
                transfer.items.add(new File([bytes], name, { type }));
            }
            return transfer;
        }""",
        encoded,
    )
    for event in ("dragenter", "dragover", "drop"):
        page.dispatch_event(selector, event, {"dataTransfer": transfer})


def screenshot(page: Page, screenshots: Path, name: str) -> None:
    """Save what the tab shows, whole page."""
    page.screenshot(path=str(screenshots / f"{name}.png"), full_page=True)


def fits_a_phone(page: Page, screenshots: Path, name: str) -> None:
    """At phone width the view needs no sideways scrolling; screenshot it, back to desktop."""
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(page, screenshots, f"phone-{name}")
    page.set_viewport_size(DESKTOP)


def test_sign_in_refuses_an_unknown_key_and_works_from_the_keyboard(
    page: Page, console: Console, screenshots: Path
) -> None:
    page.goto(console.url)
    expect(page.get_by_role("heading", name="Sign in to libflow")).to_be_visible()
    page.get_by_label("Project ID").fill(console.project_id)
    page.get_by_label("API key").fill("lf_not-a-key")
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_have_text("Unknown or revoked API key.")
    screenshot(page, screenshots, "sign-in")
    fits_a_phone(page, screenshots, "sign-in")

    page.get_by_label("API key").fill(console.api_key)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Files")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('libflow.apiKey')") == console.api_key
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in to libflow")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('libflow.apiKey')") is None


def test_a_pdf_dropped_on_the_files_view_shows_its_thumbnail(
    page: Page, console: Console, screenshots: Path
) -> None:
    sign_in(page, console)
    drop_files(page, ".dropzone", {"dropped.pdf": (fixture_bytes("report.pdf"), "application/pdf")})

    thumbnail = page.get_by_role("img", name="Thumbnail of dropped.pdf")
    expect(thumbnail).to_be_visible(timeout=PROCESSING_TIMEOUT_MS)
    assert thumbnail.evaluate("img => img.complete && img.naturalWidth > 0")
    row = page.locator(".file", has=thumbnail)
    expect(row.get_by_text("ready")).to_be_visible()
    screenshot(page, screenshots, "files")

    row.get_by_role("link", name="dropped.pdf").click()
    expect(page.get_by_role("heading", name="dropped.pdf")).to_be_visible()
    expect(page.get_by_role("img", name="Thumbnail of dropped.pdf")).to_be_visible()


def test_a_file_is_downloaded_described_reprocessed_and_deleted(
    page: Page, console: Console, screenshots: Path
) -> None:
    data = fixture_bytes("report.pdf")
    record = processed(console, upload(console, "kept.pdf", data, "pdf"))
    file_id, first_finish = record["id"], record["processing"]["steps"]["finished"]
    sign_in(page, console, f"#/files/{file_id}")
    expect(page.get_by_role("heading", name="kept.pdf")).to_be_visible()
    passages = page.get_by_role("region", name="Passages")
    expect(passages).to_contain_text("saffron tapir overture")
    expect(passages).to_contain_text("page 2")

    with page.expect_download() as download:
        page.get_by_role("button", name="Download kept.pdf").click()
    assert download.value.suggested_filename == "kept.pdf"
    assert Path(download.value.path()).read_bytes() == data

    page.get_by_role("textbox", name=re.compile("^Metadata")).fill('{"team": "blue", "year": 2026}')
    page.get_by_role("button", name="Save metadata").click()
    expect(page.get_by_text("Metadata saved")).to_be_visible()
    assert call(console, "GET", f"/library/files/{file_id}")["metadata"] == {
        "team": "blue",
        "year": 2026,
    }
    screenshot(page, screenshots, "file")
    fits_a_phone(page, screenshots, "file")

    page.get_by_role("button", name="Reprocess kept.pdf").click()
    expect(page.get_by_text("kept.pdf is being processed again")).to_be_visible()
    again = processed(console, file_id)
    assert again["processing"]["steps"]["finished"] > first_finish
    expect(page.get_by_text("ready", exact=True)).to_be_visible(timeout=PROCESSING_TIMEOUT_MS)

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete kept.pdf").click()
    expect(page.get_by_role("heading", name="Files")).to_be_visible()
    status, _ = http_json("GET", console.api(f"/library/files/{file_id}"), **console.headers)
    assert status == 404


def test_metadata_the_api_refuses_shows_what_is_wrong_with_it(page: Page, console: Console) -> None:
    file_id = upload(console, "labelled.txt", b"a short note", "txt")
    sign_in(page, console, f"#/files/{file_id}")
    page.get_by_role("textbox", name=re.compile("^Metadata")).fill('{"team": ["blue"]}')
    page.get_by_role("button", name="Save metadata").click()
    # The message names the field; the API's details say what is wrong with it.
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("VALIDATION_ERROR")
    expect(alert).to_contain_text("metadata.team: ")


def test_a_file_without_an_extension_is_not_uploaded_and_says_why(
    page: Page, console: Console
) -> None:
    sign_in(page, console)
    drop_files(page, ".dropzone", {"README": (b"no extension here", "")})
    expect(page.locator(".upload")).to_contain_text(
        "README has no extension to tell its type: rename it"
    )
    names = [f["name"] for f in call(console, "GET", "/library/files?limit=100")]
    assert "README" not in names


def test_an_error_toast_is_dismissed_by_a_click_and_left_behind_by_a_new_view(
    page: Page, console: Console
) -> None:
    sign_in(page, console)
    toasts = page.locator("#toasts .toast-error")
    drop_files(page, ".dropzone", {"NOTES": (b"no extension", "")})
    expect(toasts).to_have_count(1)
    toasts.first.click()
    expect(toasts).to_have_count(0)

    drop_files(page, ".dropzone", {"LICENSE": (b"no extension", "")})
    expect(toasts).to_have_count(1)
    page.get_by_role("link", name="Search").click()
    expect(page.get_by_role("heading", name="Search")).to_be_visible()
    expect(toasts).to_have_count(0)


def test_a_folder_is_renamed_and_deleted_only_when_empty(page: Page, console: Console) -> None:
    folder = call(console, "POST", "/library/dirs", {"name": "Drafts"})
    file_id = upload(console, "draft.txt", b"a first draft", "txt")
    call(console, "PATCH", f"/library/files/{file_id}", {"dir": folder["id"]})
    sign_in(page, console, f"#/files?dir={folder['id']}")

    page.once("dialog", lambda dialog: dialog.accept("Final"))
    page.get_by_role("button", name="Rename folder Drafts").click()
    expect(page.get_by_text("Folder renamed to Final")).to_be_visible()
    assert call(console, "GET", f"/library/dirs/{folder['id']}")["name"] == "Final"

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete folder Final").click()
    expect(page.locator("#toasts .toast-error")).to_contain_text("FOLDER_NOT_EMPTY")

    call(console, "PATCH", f"/library/files/{file_id}", {"dir": "root"})
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete folder Final").click()
    expect(page.get_by_text("Folder Final deleted")).to_be_visible()
    status, _ = http_json("GET", console.api(f"/library/dirs/{folder['id']}"), **console.headers)
    assert status == 404


def test_a_file_opened_while_it_processes_shows_its_passages_when_done(
    page: Page, console: Console
) -> None:
    file_id = upload(console, "long.pdf", fixture_bytes("hundred_pages.pdf"), "pdf")
    sign_in(page, console, f"#/files/{file_id}")
    passages = page.get_by_role("region", name="Passages")
    # Opened while it processes (a hundred pages take seconds): nothing indexed yet.
    expect(page.locator(".facts")).to_contain_text(re.compile("queued|processing"))
    expect(passages.locator("article, li, p").first).to_be_visible()
    processed(console, file_id)
    expect(passages).to_contain_text("page 1", timeout=PROCESSING_TIMEOUT_MS)


def test_a_key_the_server_refuses_while_signed_in_says_so_on_the_sign_in_form(
    page: Page, console: Console
) -> None:
    sign_in(page, console)
    page.evaluate("sessionStorage.setItem('libflow.apiKey', 'lf_not_a_key_anymore')")
    page.evaluate("location.hash = '#/search'")  # its next call is refused
    expect(page.get_by_role("heading", name="Sign in to libflow")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("Your API key was refused")


def test_a_new_webhook_joins_the_list_and_a_failed_deliverys_error_reads_as_words(
    page: Page, console: Console
) -> None:
    workflow_id = create_workflow(
        console,
        "fails when delivered",
        {
            "nodes": [
                {"id": "start", "type": "event", "event": "webhook"},
                {"id": "boom", "type": "fail", "message": "amount too large"},
            ],
            "edges": [{"from": "start", "to": "boom"}],
        },
    )
    sign_in(page, console, f"#/webhooks?workflowId={workflow_id}")
    page.get_by_text("New webhook").click()
    page.get_by_role("button", name="Create webhook").click()
    expect(page.get_by_text("Signing secret")).to_be_visible()
    table = page.get_by_role("table", name="Webhooks")
    expect(table.get_by_role("link", name="fails when delivered")).to_be_visible()

    [hook] = call(console, "GET", f"/workflows/{workflow_id}/webhooks")
    secret = call(console, "POST", f"/webhooks/{hook['webhookId']}/rotate")["secret"]
    body = b'{"amount": 1000}'
    delivered = urllib.request.Request(
        hook["url"],
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", **standard_headers(secret, body)},
    )
    with urllib.request.urlopen(delivered, timeout=30) as reply:
        assert reply.status == 200
    wait_for(
        lambda: call(console, "GET", f"/webhooks/{hook['webhookId']}/deliveries")[0]["error"],
        30,
        "the delivery did not fail",
    )
    page.goto(console.url + f"#/webhooks/{hook['webhookId']}")
    deliveries = page.get_by_role("table", name="Deliveries, newest first")
    expect(deliveries).to_contain_text("NODE_FAILED in boom: amount too large")


def test_a_files_type_is_the_one_it_was_uploaded_as_whatever_its_name(
    page: Page, console: Console
) -> None:
    file_id = upload(console, "people.csv", b"name,city\nAda,London\n", "csv")
    call(console, "PATCH", f"/library/files/{file_id}", {"name": "people.exe"})
    sign_in(page, console)
    row = page.locator(".file", has=page.get_by_role("link", name="people.exe"))
    expect(row.locator(".type-icon")).to_have_text("CSV")


def test_a_file_whose_processing_failed_is_listed_as_failed(page: Page, console: Console) -> None:
    broken = processed(console, upload(console, "broken.pdf", b"not a pdf at all", "pdf"))
    assert broken["processing"]["status"] == "failed"
    # The list's items say only whether a file is processing: the console reads the rest.
    sign_in(page, console)
    row = page.locator(".file", has=page.get_by_role("link", name="broken.pdf"))
    expect(row.locator(".status")).to_have_text("failed")


def test_search_shows_the_passage_with_its_page_and_score(
    page: Page, console: Console, screenshots: Path
) -> None:
    processed(console, upload(console, "searched.pdf", fixture_bytes("report.pdf"), "pdf"))
    sign_in(page, console, "#/search")
    page.get_by_label("Search the library").fill("saffron tapir")
    page.get_by_role("button", name="Search", exact=True).click()

    hit = page.locator(".hit").filter(has_text="searched.pdf").first
    expect(hit.locator(".passage")).to_contain_text("saffron tapir overture")
    expect(hit.get_by_text("page 2")).to_be_visible()
    expect(hit.locator(".scores dd").first).to_have_text(re.compile(r"^\d+\.\d{4}$"))
    screenshot(page, screenshots, "search")


def test_a_workflow_run_shows_its_outputs_while_it_runs(
    page: Page, console: Console, screenshots: Path
) -> None:
    # The run cannot end before the test cancels it: its first output can only have been
    # shown live, from the event stream.
    workflow_id = create_workflow(
        console,
        "greeter",
        {
            "timeoutSeconds": 120,
            "nodes": [
                {"id": "start", "type": "event", "event": "run"},
                {"id": "who", "type": "input", "name": "name", "valueType": "string"},
                {"id": "greet", "type": "template", "template": "Hello, {{ inputs.name }}!"},
                {
                    "id": "out",
                    "type": "set_output",
                    "name": "greeting",
                    "value": "{{ nodes.greet.text }}",
                },
                {"id": "wait", "type": "delay", "seconds": 100},
                {"id": "late", "type": "set_output", "name": "late", "value": "never"},
            ],
            "edges": [
                {"from": "start", "to": "greet"},
                {"from": "greet", "to": "out"},
                {"from": "out", "to": "wait"},
                {"from": "wait", "to": "late"},
            ],
        },
    )
    sign_in(page, console, f"#/workflows/{workflow_id}")
    graph = page.get_by_role("img", name=re.compile("^Graph of greeter"))
    expect(graph).to_be_visible()
    assert graph.locator("g.node").count() == 6

    page.get_by_label("name", exact=True).fill("Ada")
    page.get_by_role("button", name="Run", exact=True).click()
    outputs = page.get_by_label("Outputs", exact=True)
    expect(outputs.locator("dd")).to_have_text(["Hello, Ada!"])
    status = page.locator("#run-status")
    expect(status).to_contain_text("running")
    expect(graph.locator('g.node.done[data-node="out"]')).to_be_visible()
    expect(graph.locator('g.node.running[data-node="wait"]')).to_be_visible()
    screenshot(page, screenshots, "workflow-running")

    page.get_by_role("button", name="Cancel run").click()
    expect(status).to_contain_text("cancelled")
    expect(outputs.locator("dt")).to_have_text(["greeting"])
    screenshot(page, screenshots, "workflow")
    fits_a_phone(page, screenshots, "workflow")


def test_an_older_version_is_shown_and_run_with_its_own_inputs(
    page: Page, console: Console
) -> None:
    first = {
        "nodes": [
            {"id": "start", "type": "event", "event": "run"},
            {"id": "who", "type": "input", "name": "who", "valueType": "string", "default": "you"},
            {"id": "out", "type": "set_output", "name": "said", "value": "hi {{ inputs.who }}"},
        ],
        "edges": [{"from": "start", "to": "who"}, {"from": "who", "to": "out"}],
    }
    workflow_id = create_workflow(console, "two versions", first)
    second = {
        **first,
        "nodes": [
            *first["nodes"],
            {
                "id": "title",
                "type": "input",
                "name": "title",
                "valueType": "string",
                "required": True,
            },
        ],
    }
    call(console, "POST", f"/workflows/{workflow_id}/versions", {"definition": second})
    sign_in(page, console, f"#/workflows/{workflow_id}")
    expect(page.get_by_label("title (required)")).to_be_visible()

    page.get_by_label("Version", exact=True).select_option("1")
    expect(page.get_by_text("Version 1 (the latest is 2)")).to_be_visible()
    expect(page.get_by_label("title (required)")).to_have_count(0)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#run-outputs")).to_contain_text("hi you")
    [run] = call(console, "GET", f"/workflows/{workflow_id}/runs")
    assert (run["version"], run["status"]) == ("1", "succeeded")


def test_runs_filter_by_status_and_show_node_timings(
    page: Page, console: Console, screenshots: Path
) -> None:
    start = {"id": "start", "type": "event", "event": "run"}
    workflow_id = create_workflow(
        console,
        "sometimes fails",
        {
            "nodes": [
                start,
                {"id": "check", "type": "condition", "if": "{{ inputs.ok }}"},
                {"id": "fine", "type": "set_output", "name": "ok", "value": "yes"},
                {"id": "boom", "type": "fail", "message": "asked to fail"},
            ],
            "edges": [
                {"from": "start", "to": "check"},
                {"from": "check", "to": "fine", "when": "true"},
                {"from": "check", "to": "boom", "when": "false"},
            ],
        },
    )
    for ok in (True, False):
        http_json(
            "POST",
            console.api(f"/workflows/{workflow_id}/runsync"),
            {"inputs": {"ok": ok}},
            **console.headers,
        )
    sign_in(page, console, f"#/runs?workflowId={workflow_id}")
    runs = page.locator("tbody tr")
    expect(runs).to_have_count(2)

    page.get_by_label("Status").select_option("failed")
    page.get_by_role("button", name="Apply filters").click()
    expect(runs).to_have_count(1)
    expect(runs.first).to_contain_text("failed")
    screenshot(page, screenshots, "runs")

    runs.first.get_by_role("link").first.click()
    expect(page.get_by_text("asked to fail")).to_be_visible()
    timings = page.get_by_role("table", name=re.compile("Node timings"))
    expect(timings.get_by_role("row", name=re.compile("boom"))).to_contain_text("failed")
    screenshot(page, screenshots, "run")
    fits_a_phone(page, screenshots, "run")


def test_more_runs_load_from_this_origin_when_the_server_names_another(
    page: Page, console: Console
) -> None:
    workflow_id = create_workflow(
        console,
        "paged",
        {
            "nodes": [
                {"id": "start", "type": "event", "event": "run"},
                {"id": "out", "type": "set_output", "name": "ok", "value": "yes"},
            ],
            "edges": [{"from": "start", "to": "out"}],
        },
    )
    for _ in range(2):
        call(console, "POST", f"/workflows/{workflow_id}/runsync", {})
    public = "https://libflow.example"

    def behind_a_proxy(route: Any) -> None:
        # Pages of one run, and a Link naming the public URL a proxy serves the API at.
        answer = route.fetch(url=route.request.url.replace("limit=50", "limit=1"))
        headers = dict(answer.headers)
        if "link" in headers:
            headers["link"] = headers["link"].replace(console.server.url, public)
        route.fulfill(response=answer, headers=headers)

    page.route(re.compile(r"/runs\?"), behind_a_proxy)
    sign_in(page, console, f"#/runs?workflowId={workflow_id}")
    runs = page.locator("tbody tr")
    expect(runs).to_have_count(1)
    page.get_by_role("button", name="Load more runs").click()
    expect(runs).to_have_count(2)


def test_a_run_followed_live_survives_a_server_error_on_its_event_stream(
    page: Page, console: Console
) -> None:
    workflow_id = create_workflow(
        console,
        "short wait",
        {
            "nodes": [
                {"id": "start", "type": "event", "event": "run"},
                {"id": "wait", "type": "delay", "seconds": 2},
                {"id": "out", "type": "set_output", "name": "done", "value": "yes"},
            ],
            "edges": [{"from": "start", "to": "wait"}, {"from": "wait", "to": "out"}],
        },
    )
    queued = call(console, "POST", f"/workflows/{workflow_id}/runs", {})
    refused: list[str] = []

    def unavailable_once(route: Any) -> None:
        if refused:
            route.continue_()
            return
        refused.append(route.request.url)
        route.fulfill(
            status=503,
            headers={"Retry-After": "1"},
            content_type="application/json",
            body=json.dumps({"error": "UNAVAILABLE", "message": "restarting"}),
        )

    page.route("**/events", unavailable_once)
    sign_in(page, console, f"#/runs/{queued['runId']}")
    expect(page.get_by_text("succeeded").first).to_be_visible(timeout=PROCESSING_TIMEOUT_MS)
    assert len(refused) == 1


def test_a_false_branch_written_as_a_boolean_is_drawn_as_a_branch(
    page: Page, console: Console
) -> None:
    workflow_id = create_workflow(
        console,
        "boolean branches",
        {
            "nodes": [
                {"id": "start", "type": "event", "event": "run"},
                {"id": "check", "type": "condition", "if": "{{ true }}"},
                {"id": "yes", "type": "set_output", "name": "ok", "value": "yes"},
                {"id": "no", "type": "set_output", "name": "ok", "value": "no"},
            ],
            "edges": [
                {"from": "start", "to": "check"},
                {"from": "check", "to": "yes", "when": True},
                {"from": "check", "to": "no", "when": False},
            ],
        },
    )
    sign_in(page, console, f"#/workflows/{workflow_id}")
    graph = page.get_by_role("img", name=re.compile("^Graph of boolean branches"))
    expect(graph.locator("desc")).to_contain_text("check to no when false")
    expect(graph.locator("path.edge.when-false")).to_have_count(1)
    expect(graph.locator("text.edge-label")).to_have_text(["true", "false"])


def test_replaying_a_delivery_starts_a_new_run(
    page: Page, console: Console, screenshots: Path
) -> None:
    workflow_id = create_workflow(
        console,
        "on delivery",
        {
            "nodes": [
                {"id": "start", "type": "event", "event": "webhook"},
                {
                    "id": "out",
                    "type": "set_output",
                    "name": "order",
                    "value": "{{ inputs.payload.order }}",
                },
            ],
            "edges": [{"from": "start", "to": "out"}],
        },
    )
    hook = call(console, "POST", f"/workflows/{workflow_id}/webhooks", {})
    body = json.dumps({"order": 42}).encode()
    delivered = urllib.request.Request(
        hook["url"],
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", **standard_headers(hook["secret"], body)},
    )
    with urllib.request.urlopen(delivered, timeout=30) as reply:
        assert reply.status == 200
    wait_for(
        lambda: call(console, "GET", f"/webhooks/{hook['webhookId']}/deliveries")[0]["runId"],
        30,
        "the delivery did not run",
    )

    sign_in(page, console, "#/webhooks")
    page.get_by_role("row", name=re.compile("on delivery")).get_by_role("link").first.click()
    deliveries = page.get_by_role("table", name=re.compile("Deliveries"))
    expect(deliveries.locator("tbody tr")).to_have_count(1)
    screenshot(page, screenshots, "webhook")
    fits_a_phone(page, screenshots, "webhook")
    page.get_by_role("button", name=re.compile("^Replay")).click()
    replayed = page.locator(".replay-run")
    expect(replayed).to_be_visible()
    replayed.click()
    expect(page.locator(".run-status")).to_contain_text("succeeded")
    expect(page.get_by_text("replay", exact=True)).to_be_visible()
    expect(page.get_by_role("region", name="Outputs")).to_contain_text('"order": 42')
    page.goto(console.url + "#/webhooks")
    expect(page.get_by_role("row", name=re.compile("on delivery"))).to_be_visible()
    screenshot(page, screenshots, "webhooks")


def test_secrets_are_listed_by_name_and_their_values_never_shown(
    page: Page, console: Console, screenshots: Path
) -> None:
    sign_in(page, console, "#/secrets")
    page.get_by_label("Name", exact=True).fill("SERVICE_TOKEN")
    page.get_by_label("Value", exact=True).fill("s3cret-value-xyz")
    page.get_by_role("button", name="Save secret").click()
    expect(page.get_by_role("cell", name="SERVICE_TOKEN", exact=True)).to_be_visible()
    expect(page.get_by_label("Value", exact=True)).to_have_value("")
    assert "s3cret-value-xyz" not in page.content()
    screenshot(page, screenshots, "secrets")


@pytest.mark.parametrize("view", ["files", "search", "workflows", "runs", "webhooks", "secrets"])
def test_each_view_fits_a_phone_screen(
    page: Page, console: Console, screenshots: Path, view: str
) -> None:
    page.set_viewport_size(PHONE)
    sign_in(page, console, f"#/{view}")
    expect(page.get_by_role("heading", level=1, name=view.capitalize())).to_be_visible()
    nav = page.get_by_role("navigation", name="Views")
    expect(nav.get_by_role("link", name=view.capitalize(), exact=True)).to_have_attribute(
        "aria-current", "page"
    )
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(page, screenshots, f"phone-{view}")
