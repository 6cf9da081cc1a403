"""Fuzzing every operation of the running app from its own OpenAPI document (schemathesis).

Each operation gets requests that fit the document (positive) and requests that break it
(negative), sent over real HTTP with a valid API key and the real projectId, so they reach
the handlers. Whatever comes in, the app never answers 5xx, and every error is the one JSON
body of DESIGN section 4 with the status of its code.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode

from libflow.api.openapi import openapi_document
from tests.conftest import (
    Api,
    ClientFactory,
    Shape,
    base_settings,
    create_record,
    new_project,
    put_bytes,
)
from tests.workflow_helpers import SPEC_EXAMPLE, create, ok_json, runsync, workflows_url

OPENAPI = "/api/publicv1/openapi.json"
HTTP_METHODS = ("get", "put", "post", "delete", "patch")
# Examples per operation and generation mode; LIBFLOW_FUZZ_EXAMPLES=500 for a longer hunt.
EXAMPLES = int(os.environ.get("LIBFLOW_FUZZ_EXAMPLES", "25"))

# DESIGN section 4, plus the two codes README adds where the spec is silent.
DOCUMENTED_CODES: dict[str, int] = {
    "UNAUTHORIZED": 401,
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "VALIDATION_ERROR": 400,
    "INVALID_JSON": 400,
    "UNSUPPORTED_FILE_TYPE": 400,
    "UPLOAD_INCOMPLETE": 409,
    "EMPTY_UPLOAD": 409,
    "NOT_READY": 409,
    "CONTENT_TYPE_MISMATCH": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "INVALID_SIGNATURE": 401,
    "UNKNOWN_EVENT": 400,
    "INVALID_INPUTS": 400,
    "INVALID_WORKFLOW": 400,
    "NODE_FAILED": 500,
    "RUN_TIMEOUT": 504,
    "RUN_FINISHED": 409,
    "RATE_LIMITED": 429,
    "UNAVAILABLE": 503,
    "INTERNAL": 500,
    "LENGTH_REQUIRED": 411,
    "METHOD_NOT_ALLOWED": 405,
}
# An empty upload is refused at the PUT itself (400), and at finalize (409).
EXTRA_STATUSES = {("EMPTY_UPLOAD", 400)}


def _cases() -> list[Any]:
    """Every operation of the document, read from the code that serves it, in each mode.

    Nothing is excluded. The webhook receiver and the signed storage routes can only answer
    401/403/404 to a fuzzer (it cannot sign), which still checks their error bodies.
    Negative mode needs something it can break: a JSON body or a query parameter (the path
    ids are real or any string, and headers and raw bodies are strings or bytes whatever
    is sent, so there is nothing to negate in them).
    """
    cases = []
    for path, item in openapi_document("http://fuzz.invalid")["paths"].items():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            breakable = "application/json" in operation.get("requestBody", {}).get(
                "content", {}
            ) or any(p["in"] == "query" for p in operation.get("parameters", []))
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                if mode.is_negative and not breakable:
                    continue
                cases.append(pytest.param(method, path, mode, id=f"{method} {path} {mode}"))
    return cases


@dataclass
class Target:
    """The running app, a project's key, real ids for the path and valid body values."""

    base_url: str
    api_key: str
    ids: dict[str, str]
    valid: dict[str, Any]


@pytest.fixture
async def target(start_app: ClientFactory, tmp_path: Path) -> Target:
    """The embedded shape on a real port, with one of each resource to aim at."""
    shape = Shape("embedded", base_settings(tmp_path, rate_limit=0))
    client = await start_app(shape.settings)
    project_id, secret = await new_project()
    api = Api(client, shape, project_id, secret)

    created = await create_record(api, name="notes.txt", file_type="txt")
    async with put_bytes(api, created, b"hello, fuzzer") as response:
        assert response.status == 200, await response.text()
    finalized = await api.call("POST", "/files:complete", json={"path": created["path"]})
    assert finalized.status == 200, await finalized.text()
    await api.run_jobs()
    folder = await (await api.call("POST", "/dirs", json={"name": "Fuzzed"})).json()
    workflow = await create(api, SPEC_EXAMPLE)
    workflow_id = workflow["workflowId"]
    status, _ = await runsync(api, workflow_id, inputs={"name": "fuzz"})
    assert status == 200
    runs = await ok_json(
        await api.client.get(workflows_url(project_id, f"/{workflow_id}/runs"), headers=api.headers)
    )
    webhook = await ok_json(
        await api.client.post(
            workflows_url(project_id, f"/{workflow_id}/webhooks"),
            headers=api.headers,
            json={"event": "run"},  # SPEC_EXAMPLE's event
        ),
        201,
    )
    return Target(
        base_url=shape.settings.resolved_public_base_url,
        api_key=secret,
        ids={
            "projectId": project_id,
            "fileId": created["documentId"],
            "workflowId": workflow_id,
            "runId": runs[0]["runId"],
            "webhookId": webhook["webhookId"],
        },
        valid={
            "definition": SPEC_EXAMPLE,
            "fileType": "txt",
            "dir": folder["id"],
            "parent": "root",
            "path": created["path"],
            "version": "1",
            "inputs": {"name": "fuzz"},
        },
    )


def contract_violation(status: int, content_type: str, body: bytes) -> str | None:
    """What is wrong with a response under DESIGN section 4, or None."""
    if status >= 500:
        return f"a {status} answer"
    if status < 400:
        return None
    if content_type.split(";")[0].strip() != "application/json":
        return f"a {status} error as {content_type!r}, not JSON"
    try:
        error = json.loads(body)
    except ValueError:
        return f"a {status} error whose body is not JSON"
    if not isinstance(error, dict) or not {"error", "message"} <= set(error):
        return f"a {status} error without error and message"
    if not set(error) <= {"error", "message", "details"}:
        return f"a {status} error with extra keys {sorted(set(error))}"
    code, message = error["error"], error["message"]
    if code not in DOCUMENTED_CODES:
        return f"a {status} error with the undocumented code {code!r}"
    if not isinstance(message, str) or not message:
        return f"a {status} {code} error without a message"
    if DOCUMENTED_CODES[code] != status and (code, status) not in EXTRA_STATUSES:
        return f"{code} answered with {status}, not {DOCUMENTED_CODES[code]}"
    return None


def send(target: Target, case: Case) -> int:
    """Send one case with the project's key; fail unless the answer keeps the contract."""
    response = case.call(
        base_url=target.base_url, headers={"Authorization": target.api_key}, timeout=30
    )
    content_type = (response.headers.get("content-type") or [""])[0]
    problem = contract_violation(response.status_code, content_type, response.content)
    assert problem is None, (
        f"{problem}: {response.content[:500]!r}\n"
        f"{case.as_curl_command(headers={'Authorization': target.api_key})}"
    )
    return response.status_code


def with_valid_values(case: Case, target: Target, fields: frozenset[str] | None = None) -> None:
    """Valid values for some body fields, so the fields beside them get past validation.

    A generated workflow definition, fileType or finalize path is nearly always refused
    before anything reaches the database; ``fields`` None stands for all of them.
    """
    if isinstance(case.body, dict):
        for name, value in target.valid.items():
            if name in case.body and (fields is None or name in fields):
                case.body[name] = value


def real_ids(path: str, ids: dict[str, str]) -> dict[str, str]:
    """The real ids of the path's parameters."""
    return {name: ids[name] for name in re.findall(r"\{(\w+)\}", path) if name in ids}


def boundary_cases(schema: Any, operation: Any, mode: GenerationMode, target: Target) -> list[Case]:
    """Schemathesis' coverage phase: each value at and past its documented limits.

    Deterministic, and what random generation rarely reaches (a string of exactly
    maxLength). Each case goes as generated (with the real projectId), and again aimed
    at the real resources with valid values in the other body fields.
    """
    config = schema.config.generation_for(operation=operation)
    generated = schema.iter_coverage_cases(
        operation, generation_modes=[mode], generation_config=config
    )
    real = real_ids(operation.path, target.ids)
    cases = []
    for case in generated:
        if "projectId" in real:
            case.path_parameters["projectId"] = real["projectId"]
        aimed = case.derive()
        aimed.path_parameters.update(real)
        with_valid_values(aimed, target)
        cases += [case, aimed]
    return cases


def random_cases(operation: Any, mode: GenerationMode, target: Target) -> st.SearchStrategy[Case]:
    """Hypothesis-generated cases: with the real ids half the time, generated ones otherwise."""
    real = real_ids(operation.path, target.ids)
    project = {name: value for name, value in real.items() if name == "projectId"}
    return st.one_of(
        operation.as_strategy(generation_mode=mode, path_parameters=real),
        operation.as_strategy(generation_mode=mode, path_parameters=project),
    )


def fuzz(target: Target, schema: Any, method: str, path: str, mode: GenerationMode) -> list[int]:
    """Send the boundary cases, then random ones; return every status the app answered."""
    operation = schema[path][method.upper()]
    statuses = [send(target, case) for case in boundary_cases(schema, operation, mode, target)]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=os.environ.get("LIBFLOW_FUZZ_RANDOM") is None,
        # Shrinking a failure can cost minutes; the failing request is reported as sent.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(
        case=random_cases(operation, mode, target),
        valid_fields=st.frozensets(st.sampled_from(sorted(target.valid))),
    )
    def send_random(case: Case, valid_fields: frozenset[str]) -> None:
        with_valid_values(case, target, valid_fields)
        statuses.append(send(target, case))

    send_random()
    return statuses


@pytest.mark.parametrize(("method", "path", "mode"), _cases())
async def test_no_request_gets_a_5xx_or_an_undocumented_error(
    target: Target, method: str, path: str, mode: GenerationMode
) -> None:
    # The schema under test is the one the running app serves, not the code's dict.
    schema = await asyncio.to_thread(schemathesis.openapi.from_url, target.base_url + OPENAPI)
    # The key is sent with every call: a generated (or left out) key would only test the
    # key check, which tests/test_library_errors.py covers, and never reach a handler.
    schema.config.generation.update(with_security_parameters=False)
    # requests is synchronous: the fuzzer runs on a thread while this loop serves the app.
    statuses = await asyncio.to_thread(fuzz, target, schema, method, path, mode)

    assert statuses
    if path.startswith("/api/publicv1/projects/"):
        # Calls that stop at the key check prove nothing about the handlers.
        reached = [s for s in statuses if s not in (401, 403)]
        assert len(reached) >= len(statuses) // 2, sorted(statuses)
