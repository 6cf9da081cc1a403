"""``libflow files ...`` and ``libflow search``: the file library through the public API."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from libflow.cli.connection import add_connection_options, add_project_argument, client_of
from libflow.cli.output import CliError, add_output_option, print_record, print_records

FILE_COLUMNS = (
    ("ID", lambda f: f.get("id")),
    ("NAME", lambda f: f.get("name")),
    ("SIZE", lambda f: f.get("size")),
    ("DIR", lambda f: f.get("dir")),
    ("UPDATING", lambda f: "yes" if f.get("updating") else ""),
    ("CREATED", lambda f: f.get("createdDate")),
)
HIT_COLUMNS = (
    ("SCORE", lambda h: round(h["score"], 3) if isinstance(h.get("score"), float) else None),
    ("FILE", lambda h: h.get("name")),
    ("PAGE", lambda h: h.get("page")),
    ("PASSAGE", lambda h: h.get("chunk")),
)
CHUNK_COLUMNS = (
    ("INDEX", lambda c: c.get("index")),
    ("PAGE", lambda c: c.get("page")),
    ("TOKENS", lambda c: c.get("tokens")),
    ("TEXT", lambda c: c.get("text")),
)


def add_library_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``libflow files list|get|download|delete|chunks|reprocess`` and ``libflow search``."""
    files = sub.add_parser("files", help="list, inspect, download and delete library files")
    actions = files.add_subparsers(dest="action", required=True)

    li = actions.add_parser("list", help="the project's files, newest first")
    add_project_argument(li)
    li.add_argument("--dir", help="only this folder's files (a folder id or root)")
    _common(li, list_files)

    for name, help_text, run in (
        ("get", "one file's record: processing state, metadata, pages", get_file),
        ("delete", "delete a file: record, bytes, thumbnail and passages", delete_file),
        ("reprocess", "run a finished file through processing again", reprocess_file),
        ("chunks", "the file's passages as search indexes them", file_chunks),
    ):
        p = actions.add_parser(name, help=help_text)
        add_project_argument(p)
        p.add_argument("file_id", metavar="FILE_ID")
        _common(p, run)

    d = actions.add_parser("download", help="download a file's bytes")
    add_project_argument(d)
    d.add_argument("file_id", metavar="FILE_ID")
    d.add_argument("-o", "--out", metavar="PATH", help="where to write (default: its name)")
    d.add_argument("--thumbnail", action="store_true", help="its WEBP thumbnail instead")
    _common(d, download_file)

    s = sub.add_parser("search", help="search the library's passages")
    add_project_argument(s)
    s.add_argument("query")
    s.add_argument("--limit", type=int, default=10, help="hits, 1..100 (10)")
    s.add_argument("--dir", help="only this folder (a folder id or root)")
    s.add_argument("--mode", choices=("hybrid", "keyword", "semantic"), help="(hybrid)")
    s.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="a metadata filter: topic='\"birds\"' or year=2024 (repeatable)",
    )
    _common(s, search)


def _common(parser: argparse.ArgumentParser, run: Any) -> None:
    add_output_option(parser)
    add_connection_options(parser)
    parser.set_defaults(run=run)


async def list_files(args: argparse.Namespace) -> None:
    """``libflow files list``."""
    async with client_of(args) as client:
        files = await client.library.files(dir=args.dir)
    print_records([dict(f) for f in files], args.output, FILE_COLUMNS)


async def get_file(args: argparse.Namespace) -> None:
    """``libflow files get``."""
    async with client_of(args) as client:
        print_record(dict(await client.library.file(args.file_id)), args.output)


async def delete_file(args: argparse.Namespace) -> None:
    """``libflow files delete``."""
    async with client_of(args) as client:
        await client.library.delete_file(args.file_id)
    print_record({"id": args.file_id, "deleted": True}, args.output)


async def reprocess_file(args: argparse.Namespace) -> None:
    """``libflow files reprocess``."""
    async with client_of(args) as client:
        print_record(dict(await client.library.reprocess(args.file_id)), args.output)


async def file_chunks(args: argparse.Namespace) -> None:
    """``libflow files chunks``."""
    async with client_of(args) as client:
        chunks = [dict(c) async for c in client.library.iter_chunks(args.file_id)]
    print_records(chunks, args.output, CHUNK_COLUMNS)


async def download_file(args: argparse.Namespace) -> None:
    """``libflow files download``: the bytes into ``--out``, or the file's own name here."""
    async with client_of(args) as client:
        record = await client.library.file(args.file_id)
        default = f"{Path(record['name']).stem}.webp" if args.thumbnail else record["name"]
        # Only the name's last part: a stored name never writes outside this folder.
        target = Path(args.out) if args.out else Path(Path(default).name)
        written = await client.library.download(args.file_id, target, thumbnail=args.thumbnail)
    print_record({"id": args.file_id, "path": str(target), "bytes": written}, args.output)


async def search(args: argparse.Namespace) -> None:
    """``libflow search``."""
    async with client_of(args) as client:
        hits = await client.library.search(
            args.query,
            limit=args.limit,
            dir=args.dir,
            mode=args.mode,
            filter=_filters(args.filter) or None,
        )
    print_records([dict(h) for h in hits], args.output, HIT_COLUMNS)


def _filters(pairs: list[str]) -> dict[str, Any]:
    """``KEY=JSON`` pairs; a value that is not JSON is taken as a string."""
    found: dict[str, Any] = {}
    for pair in pairs:
        key, equals, text = pair.partition("=")
        if not equals or not key:
            raise CliError(f"--filter {pair!r} is not KEY=VALUE")
        try:
            found[key] = json.loads(text)
        except ValueError:
            found[key] = text
    return found
