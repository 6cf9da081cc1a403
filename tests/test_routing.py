"""The route tree finds the route aiohttp's own router would, for every path and method."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from libflow.api.routing import RouteTree, route_tree
from libflow.app import ROUTE_TABLES, create_app
from settings import Settings

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


async def handler(request: web.Request) -> web.Response:
    return web.Response()


def stock_and_tree(tables: list[web.RouteTableDef]) -> tuple[web.Application, web.Application]:
    """The same routes in an app with aiohttp's router alone, and in one with a RouteTree."""
    stock, with_tree = web.Application(), web.Application()
    tree = RouteTree()
    for table in tables:
        stock.add_routes(table)
        tree.add_routes(table)
    with_tree.router.register_resource(tree)
    stock.router.freeze()
    with_tree.router.freeze()
    return stock, with_tree


async def found(app: web.Application, method: str, path: str) -> tuple[Any, ...]:
    match = await app.router.resolve(make_mocked_request(method, path, app=app))
    error = match.http_exception
    if error is not None:
        return (error.status, sorted(getattr(error, "allowed_methods", ())))
    return (match.route.method, match.route.resource.canonical, dict(match))  # type: ignore[union-attr]


def libflow_paths(app: web.Application) -> list[str]:
    """Each route's path with its variables filled, and near misses of it."""
    paths: set[str] = set()
    for route in app.router.routes():
        resource = route.resource
        assert resource is not None
        path = resource.canonical
        for value in ("a1", "b2c3"):
            filled = path
            while "{" in filled:
                start, end = filled.index("{"), filled.index("}")
                filled = filled[:start] + value + filled[end + 1 :]
            paths |= {filled, filled + "/", filled + "/extra", filled.rpartition("/")[0] or "/"}
    return sorted(paths | {"/", "/nowhere", "/api/publicv1/projects/p1/files:complete"})


async def test_libflow_routes_are_found_as_aiohttp_finds_them(tmp_path: Path) -> None:
    with_tree = create_app(Settings(data_dir=tmp_path))
    with_tree.router.freeze()
    stock = web.Application()
    for table in ROUTE_TABLES:
        stock.add_routes(table)
    stock.router.freeze()
    paths = libflow_paths(with_tree)
    assert len(paths) > 100
    for path, method in itertools.product(paths, METHODS):
        assert await found(with_tree, method, path) == await found(stock, method, path), (
            method,
            path,
        )


async def test_order_of_registration_decides_between_routes_of_the_same_shape() -> None:
    routes = web.RouteTableDef()
    routes.get("/items/{name}")(handler)
    routes.get("/items/{other}")(handler)
    routes.get("/items/special")(handler)
    stock, with_tree = stock_and_tree([routes])
    for path in ("/items/x", "/items/special", "/items/special/"):
        assert await found(with_tree, "GET", path) == await found(stock, "GET", path)
    assert (await found(with_tree, "GET", "/items/special"))[1] == "/items/special"


async def test_a_variable_with_a_regex_of_its_own_may_span_segments() -> None:
    routes = web.RouteTableDef()
    routes.get("/files/{tail:.+}")(handler)
    routes.get("/files/{name}/meta")(handler)
    routes.post("/numbers/{n:\\d+}")(handler)
    stock, with_tree = stock_and_tree([routes])
    paths = ("/files/a", "/files/a/b/c", "/files/a/meta", "/numbers/12", "/numbers/x", "/files")
    for path, method in itertools.product(paths, ("GET", "POST")):
        assert await found(with_tree, method, path) == await found(stock, method, path)
    assert await found(with_tree, "GET", "/files/a/b/c") == (
        "GET",
        "/files/{tail}",
        {"tail": "a/b/c"},
    )


async def test_a_path_of_the_right_shape_but_another_method_is_405_with_allow() -> None:
    routes = web.RouteTableDef()
    routes.get("/things/{id}")(handler)
    routes.delete("/things/{id}")(handler)
    stock, with_tree = stock_and_tree([routes])
    assert await found(with_tree, "PUT", "/things/1") == (405, ["DELETE", "GET", "HEAD"])
    assert await found(with_tree, "PUT", "/things/1") == await found(stock, "PUT", "/things/1")
    assert await found(with_tree, "GET", "/things") == (404, [])


async def test_percent_encoded_segments_match_as_aiohttp_matches_them() -> None:
    routes = web.RouteTableDef()
    routes.post("/jobs:run")(handler)
    routes.get("/names/{name}")(handler)
    stock, with_tree = stock_and_tree([routes])
    for method, path in (
        ("POST", "/jobs%3Arun"),
        ("GET", "/names/a%2Fb"),
        ("GET", "/names/%C3%A9"),
    ):
        assert await found(with_tree, method, path) == await found(stock, method, path)


def test_the_tree_of_an_app_is_where_more_routes_go(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path))
    tree = route_tree(app)
    before = len(tree)
    tree.add_route("GET", "/extra/{id}", handler)
    assert len(tree) == before + 1
    with pytest.raises(LookupError):
        route_tree(web.Application())
