"""The library_search node with the options of POST .../library/search: dir, filter, mode."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api
from tests.search_helpers import upload_labelled
from tests.workflow_helpers import chain, create, ok_json, output, run_definition, workflows_url

TEAM_INPUT = {"id": "team", "type": "input", "name": "team", "valueType": "string"}


def searching(**options: Any) -> dict[str, Any]:
    """A definition: search "walrus harbour" with ``options``, output the results."""
    return chain(
        TEAM_INPUT,
        {"id": "find", "type": "library_search", "query": "walrus harbour", **options},
        output("results", "{{ nodes.find.results }}"),
    )


async def test_the_node_filters_by_metadata_folder_and_mode(shaped_api: Api) -> None:
    folder = await (await shaped_api.call("POST", "/dirs", json={"name": "archive"})).json()
    finance = await upload_labelled(shaped_api, "Walrus harbour budget.", {"team": "finance"})
    await upload_labelled(shaped_api, "Walrus harbour contract.", {"team": "legal"})
    await upload_labelled(
        shaped_api, "Walrus harbour budget, archived.", {"team": "finance"}, folder=folder["id"]
    )
    definition = searching(filter={"team": "{{ inputs.team }}"}, dir="root", mode="keyword")
    status, body = await run_definition(shaped_api, definition, inputs={"team": "finance"})
    assert status == 200, body
    [hit] = body["result"]["outputs"]["results"]
    assert hit["fileId"] == finance
    assert hit["metadata"] == {"team": "finance"}
    assert hit["scores"]["semantic"] is None


async def test_the_node_takes_in_lists(api: Api) -> None:
    finance = await upload_labelled(api, "Walrus harbour budget.", {"team": "finance"})
    legal = await upload_labelled(api, "Walrus harbour contract.", {"team": "legal"})
    await upload_labelled(api, "Walrus harbour memo.", {"team": "sales"})
    status, body = await run_definition(
        api, searching(filter={"team": {"in": ["finance", "legal"]}}), inputs={}
    )
    assert status == 200, body
    found = {hit["fileId"] for hit in body["result"]["outputs"]["results"]}
    assert found == {finance, legal}


async def test_a_bad_filter_fails_the_node(api: Api) -> None:
    for bad in ({"bad key": 1}, {"team": [1]}, "{{ inputs.team }}"):
        status, body = await run_definition(api, searching(filter=bad), inputs={"team": "x"})
        assert status == 500, body
        assert body["result"]["error"]["node"] == "find"
        assert "filter" in body["result"]["error"]["message"]


async def test_an_unknown_folder_fails_the_node(api: Api) -> None:
    status, body = await run_definition(api, searching(dir="nosuchfolder"), inputs={})
    assert status == 500, body
    assert "folder" in body["result"]["error"]["message"]


async def test_an_unknown_mode_is_refused_at_publish(api: Api) -> None:
    response = await api.client.post(
        workflows_url(api.project_id),
        headers=api.headers,
        json={"name": "flow", "definition": searching(mode="fuzzy")},
    )
    body = await ok_json(response, 400)
    assert body["error"] == "INVALID_WORKFLOW"


async def test_the_node_keeps_working_without_options(api: Api) -> None:
    file_id = await upload_labelled(api, "Walrus harbour budget.", {"team": "finance"})
    created = await create(api, searching())
    assert created["workflowId"]
    status, body = await run_definition(api, searching(), inputs={})
    assert status == 200, body
    assert [hit["fileId"] for hit in body["result"]["outputs"]["results"]] == [file_id]


async def test_a_query_the_search_api_would_refuse_fails_the_node(api: Api) -> None:
    """An input that renders the query empty or too long fails the run with the reason,
    where it used to search for nothing and return unrelated hits."""
    await upload_labelled(api, "Walrus harbour budget.", {"team": "finance"})
    definition = chain(
        TEAM_INPUT,
        {"id": "find", "type": "library_search", "query": "{{ inputs.team }}"},
        output("results", "{{ nodes.find.results }}"),
    )
    for team, problem in (
        ("   ", "query is empty"),
        ("walrus " * 400, "query is longer than 2000 characters"),
    ):
        status, body = await run_definition(api, definition, inputs={"team": team})
        assert status == 500, body
        error = body["result"]["error"]
        assert (error["node"], error["code"]) == ("find", "NODE_FAILED")
        assert error["message"].startswith(problem), error
