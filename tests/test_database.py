"""The schema: created by migrations on first start, kept in step with the models."""

from __future__ import annotations

import asyncio
import contextvars
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tortoise.context import get_current_context
from tortoise.migrations.autodetector import MigrationAutodetector

from libflow import appkeys
from libflow.db.connection import open_database, tortoise_config
from libflow.db.fast_reads import AnyFolder, FileRecord, _file_page_in_orm
from libflow.db.new_rows import new_instance
from libflow.ids import utcnow
from libflow.models import Folder, LibraryFile, ProcessingStatus, Project, WorkflowRun
from tests.conftest import Api, ClientFactory, base_settings, new_project

ROOT = Path(__file__).resolve().parent.parent


async def test_migrations_match_the_models(api: Api) -> None:
    ctx = get_current_context()
    assert ctx is not None and ctx.apps is not None
    config = tortoise_config(api.shape.settings.resolved_database_url)
    detector = MigrationAutodetector(ctx.apps, config["apps"])
    pending = await detector.changes()
    assert pending == [], (
        "models changed: run `tortoise -c libflow.db.connection.TORTOISE_ORM makemigrations`"
    )


async def test_one_process_can_open_sqlite_and_then_postgresql(
    tmp_path: Path, postgres_url: str
) -> None:
    # Tortoise caches each model's INSERT by connection name: SQLite's "?" placeholders
    # reached PostgreSQL ("syntax error at or near ','") in a benchmark run that did this.
    async with open_database(f"sqlite://{tmp_path / 'first.sqlite3'}"):
        await Project.create(name="on SQLite")
    async with open_database(postgres_url):
        project = await Project.create(name="on PostgreSQL")
        assert await Project.get(id=project.id)


async def test_a_restart_keeps_the_data(start_app: ClientFactory, tmp_path: Path) -> None:
    settings = base_settings(tmp_path)
    client = await start_app(settings)
    project_id, _ = await new_project("kept")
    await client.close()

    client = await start_app(settings)
    assert await Project.get_or_none(id=project_id) is not None
    await client.close()


async def test_concurrent_startups_migrate_once_on_postgres(postgres_url: str) -> None:
    # An API process and workers starting together must not race on the schema.
    async def start() -> None:
        async with open_database(postgres_url):
            await Project.all().count()

    await asyncio.gather(
        *(asyncio.create_task(start(), context=contextvars.Context()) for _ in range(3))
    )


def test_a_process_exits_by_itself_after_the_app_stops(tmp_path: Path) -> None:
    # An unclosed aiosqlite connection keeps its thread alive and the interpreter
    # never exits: start and stop the embedded app in a child and require it ends.
    script = textwrap.dedent(
        f"""
        import asyncio
        from aiohttp.test_utils import TestClient, TestServer
        from settings import Settings
        from libflow.app import create_app

        async def main():
            app = create_app(Settings(data_dir={str(tmp_path)!r}))
            async with TestClient(TestServer(app)) as client:
                assert (await client.get("/readyz")).status == 200

        asyncio.run(main())
        print("done")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"


async def test_the_inline_reads_give_what_the_orm_gives(api: Api) -> None:
    # On SQLite the hottest reads build their instances from the row themselves
    # (db/fast_reads.py): every field must come out as Tortoise's own read has it.
    app = api.client.app
    assert app is not None
    reads = app[appkeys.READS]
    created = await LibraryFile.create(
        project_id=api.project_id,
        name="notes.txt",
        file_type="txt",
        mime_type="text/plain",
        storage_key=f"{api.project_id}/notes.txt",
        size=2**40,
        sha256="ab" * 32,
        updating=False,
        finalized_at=utcnow(),
        status=ProcessingStatus.DONE,
        steps={"queued": "2026-11-24T00:00:00.000Z"},
        metadata={"team": "ops", "year": 2026, "draft": True, "big": 2**70},
        warning="NO_TEXT",
    )
    inline = await reads.file(api.project_id, created.id)
    orm = await LibraryFile.get(id=created.id)
    assert inline is not None
    names = [*LibraryFile._meta.db_fields, "project_id", "folder_id"]
    assert {n: getattr(inline, n) for n in names} == {n: getattr(orm, n) for n in names}
    assert {n: type(getattr(inline, n)) for n in names} == {n: type(getattr(orm, n)) for n in names}
    assert inline._saved_in_db and not inline._partial
    inline.name = "renamed.txt"  # an instance read inline saves like any other
    await inline.save(update_fields=["name"])
    assert (await LibraryFile.get(id=created.id)).name == "renamed.txt"


async def test_a_file_record_read_inline_is_the_record_of_the_orms_model(api: Api) -> None:
    # GET one reads its record straight from the row (db/fast_reads.py), without a model.
    app = api.client.app
    assert app is not None
    reads = app[appkeys.READS]
    created = await LibraryFile.create(
        project_id=api.project_id,
        name="notes ✓.txt",
        file_type="txt",
        mime_type="text/plain",
        storage_key=f"{api.project_id}/notes.txt",
        size=2**40,
        updating=False,
        indexed=True,
        finalized_at=utcnow(),
        status=ProcessingStatus.DONE,
        steps={"queued": "2026-11-24T00:00:00.000Z"},
        metadata={"team": "ops", "year": 2026, "draft": True, "city": "Zürich"},
        pages=3,
    )
    assert reads.inline.values("SELECT 1", ()) == (1,)  # the read below is the inline one
    inline = await reads.file_record(api.project_id, created.id)
    assert inline is not None
    of_model = FileRecord.of(await LibraryFile.get(id=created.id))
    as_read = inline._asdict()
    expected = of_model._asdict()
    for name in ("metadata_json", "steps_json"):  # the same JSON, maybe not the same text
        assert json.loads(as_read.pop(name)) == json.loads(expected.pop(name))
    assert as_read == expected
    assert {n: type(v) for n, v in as_read.items()} == {n: type(v) for n, v in expected.items()}
    assert await reads.file_record(api.project_id, "f" * 24) is None
    assert await reads.file_record("p" * 24, created.id) is None


async def test_a_page_of_file_records_read_inline_is_what_the_orm_reads(api: Api) -> None:
    # The file list reads its page straight from the rows too: the same records, in the
    # same order, for every filter the list has (a folder, the root, a cursor).
    app = api.client.app
    assert app is not None
    reads = app[appkeys.READS]
    folder = await Folder.create(project_id=api.project_id, name="reports", parent_id=None)
    for index in range(5):
        await LibraryFile.create(
            project_id=api.project_id,
            folder_id=folder.id if index % 2 else None,
            name=f"notes {index}.txt",
            file_type="txt",
            mime_type="text/plain",
            storage_key=f"{api.project_id}/notes-{index}.txt",
            metadata={"index": index},
        )
    first_two = await LibraryFile.filter(project_id=api.project_id).order_by("created_at").limit(2)
    # Two share a moment: the id breaks the tie.
    await LibraryFile.filter(id__in=[f.id for f in first_two]).update(created_at=utcnow())
    newest_first = await reads.file_records_page(
        api.project_id, folder=AnyFolder.ANY, after=None, limit=10
    )
    assert len(newest_first) == 5
    after = (newest_first[2].created_at, newest_first[2].id)
    for folder_filter in (AnyFolder.ANY, None, folder.id):
        for cursor in (None, after):
            inline = await reads.file_records_page(
                api.project_id, folder=folder_filter, after=cursor, limit=2
            )
            orm = await _file_page_in_orm(api.project_id, folder_filter, cursor, 2)
            assert [record._asdict() for record in inline] == [
                FileRecord.of(file)._asdict() for file in orm
            ]
    assert [r.id for r in newest_first[3:]] == [
        r.id
        for r in await reads.file_records_page(
            api.project_id, folder=AnyFolder.ANY, after=after, limit=10
        )
    ]


async def test_a_run_record_made_fast_is_what_the_model_makes(api: Api) -> None:
    # Every run's record is made by db/new_rows.py rather than WorkflowRun(**values).
    values = {
        "id": "r" * 32,
        "workflow_id": "w" * 32,
        "project_id": api.project_id,
        "version": 1,
        "event": "run",
        "trigger": "api",
        "status": "queued",
        "inputs": {"name": "Ada"},
        "started_at": utcnow(),
    }
    fast = new_instance(WorkflowRun, **values)
    assert fast.__dict__ == WorkflowRun(**values).__dict__
    assert fast.outputs == {} and fast.outputs is not new_instance(WorkflowRun, **values).outputs
