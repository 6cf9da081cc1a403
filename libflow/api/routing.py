"""The app's routes, found by their path's segments rather than one regex after another.

aiohttp indexes a route by its path up to the first variable, so every project route shares
one entry (``/api/publicv1/projects``) and a request tries their regexes in turn: 30 of
them, about a microsecond each, before the last one answers. ``RouteTree`` keeps the routes
in a tree of path segments, where a segment holding a variable matches any one segment, and
tries only the routes whose shape fits the path. It tries them in aiohttp's own order
(longest static prefix first, then the order of registration) and each route's resource
still decides whether it matches, so which route answers, and a 405's ``Allow``, are what
aiohttp alone would give.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.abc import AbstractView
from aiohttp.typedefs import Handler
from aiohttp.web_urldispatcher import (
    AbstractResource,
    AbstractRoute,
    DynamicResource,
    PlainResource,
    _InfoDict,
    _Resolve,
)
from yarl import URL

# aiohttp's pattern of a ``{name}`` variable: one path segment, never empty.
_ONE_SEGMENT = f">{DynamicResource.GOOD})"

Ranked = tuple[tuple[int, int], AbstractResource]


@dataclass(slots=True)
class _Branch:
    """The routes whose path ends here, and the branches one segment further."""

    by_segment: dict[str, _Branch] = field(default_factory=dict)
    any_segment: _Branch | None = None
    resources: list[Ranked] = field(default_factory=list)
    # Resources whose path goes on from here other than segment by segment (a variable
    # with a regex of its own, which may span several): tried for any path through here.
    any_rest: list[Ranked] = field(default_factory=list)


def _aiohttp_rank(resource: AbstractResource, order: int) -> tuple[int, int]:
    """Where aiohttp's router would try ``resource``: its index key (the canonical path up
    to the segment of its first variable) is looked up longest first, then in order."""
    key = resource.canonical
    if "{" in key:
        key = key.partition("{")[0].rpartition("/")[0]
    return (-len(key.rstrip("/") or "/"), order)


def _rank(ranked: Ranked) -> tuple[int, int]:
    return ranked[0]


def _segments(resource: AbstractResource) -> tuple[list[str | None], bool]:
    """The path's segments (None for one holding a variable), and whether they are all:
    False when the resource may match beyond them other than segment by segment (a
    variable with a regex of its own), and then only the segments before it are given."""
    parts = resource.canonical.split("/")[1:]
    if isinstance(resource, DynamicResource):
        pattern = resource.get_info()["pattern"]
        whole = pattern.groups == pattern.pattern.count(_ONE_SEGMENT)
    else:
        whole = isinstance(resource, PlainResource)
    if not whole:
        return list(parts[: _first_variable(parts)]), False
    return [None if "{" in part else part for part in parts], True


def _first_variable(parts: list[str]) -> int:
    return next((i for i, part in enumerate(parts) if "{" in part), len(parts))


class RouteTree(AbstractResource):
    """Routes added here (as to ``app.router``), found by the segments of the path."""

    def __init__(self) -> None:
        super().__init__()
        # Makes the resources and routes exactly as aiohttp does; never asked to resolve.
        self._routes = web.UrlDispatcher()
        self._root: _Branch | None = None

    def add_routes(self, routes: Iterable[web.AbstractRouteDef]) -> None:
        """Add a table of routes (``web.RouteTableDef``)."""
        self._routes.add_routes(routes)
        self._root = None

    def add_route(
        self, method: str, path: str, handler: Handler | type[AbstractView]
    ) -> AbstractRoute:
        """Add one route."""
        self._root = None
        return self._routes.add_route(method, path, handler)

    def _build(self) -> _Branch:
        root = _Branch()
        for order, resource in enumerate(self._routes.resources()):
            ranked = (_aiohttp_rank(resource, order), resource)
            segments, whole = _segments(resource)
            branch = root
            for segment in segments:
                if segment is None:
                    branch.any_segment = branch.any_segment or _Branch()
                    branch = branch.any_segment
                else:
                    branch = branch.by_segment.setdefault(segment, _Branch())
            (branch.resources if whole else branch.any_rest).append(ranked)
        self._root = root
        return root

    def candidates(self, path: str) -> list[Ranked]:
        """The resources that may match ``path``, in the order aiohttp would try them."""
        root = self._root or self._build()
        segments = path.split("/")[1:]
        last = len(segments)
        found: list[Ranked] = []
        sources = 0  # each branch's own list is in order already
        pending = [(root, 0)]
        while pending:
            branch, depth = pending.pop()
            if branch.any_rest:
                found += branch.any_rest
                sources += 1
            if depth == last:
                if branch.resources:
                    found += branch.resources
                    sources += 1
                continue
            if branch.any_segment is not None:
                pending.append((branch.any_segment, depth + 1))
            child = branch.by_segment.get(segments[depth])
            if child is not None:
                pending.append((child, depth + 1))
        if sources > 1:
            found.sort(key=_rank)
        return found

    async def resolve(self, request: web.Request) -> _Resolve:
        """The first route that matches, as aiohttp's router finds it; else the methods
        that the path allows (a 405), or none (a 404)."""
        allowed: set[str] = set()
        for _, resource in self.candidates(request.rel_url.path_safe):
            match, methods = await resource.resolve(request)
            if match is not None:
                return match, methods
            allowed |= methods
        return None, allowed

    @property
    def canonical(self) -> str:
        """The root: the tree holds paths of every shape."""
        return "/"

    def url_for(self, **kwargs: str) -> URL:
        """The tree has no URL of its own; each of its resources has."""
        raise RuntimeError("a RouteTree has no URL: ask the resource of one of its routes")

    def add_prefix(self, prefix: str) -> None:
        """Put ``prefix`` before every path (a sub-application's)."""
        for resource in self._routes.resources():
            resource.add_prefix(prefix)
        self._root = None

    def get_info(self) -> _InfoDict:
        """Nothing beyond what each route's resource tells."""
        return {}

    def raw_match(self, path: str) -> bool:
        """Never: a route added to the app's router after the tree is a resource of its own."""
        return False

    def freeze(self) -> None:
        """No more routes: build the tree now rather than at the first request."""
        self._routes.freeze()
        self._build()

    def __len__(self) -> int:
        return len(self._routes.routes())

    def __iter__(self) -> Iterator[AbstractRoute]:
        return iter(self._routes.routes())


def route_tree(app: web.Application) -> RouteTree:
    """The ``RouteTree`` that holds ``app``'s routes."""
    for resource in app.router.resources():
        if isinstance(resource, RouteTree):
            return resource
    raise LookupError("this application keeps its routes in no RouteTree")
