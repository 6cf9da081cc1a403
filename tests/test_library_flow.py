"""The spec's whole library flow through HTTP, on each deployment shape."""

from __future__ import annotations

import hashlib

from yarl import URL

from tests.conftest import Api, fixture_bytes, wait_until_processed


async def test_create_put_finalize_list_download(shaped_api: Api) -> None:
    api = shaped_api
    data = fixture_bytes("report.pdf")
    record = await api.upload(data, name="Quarterly report.pdf")
    assert record["updating"] is True
    assert record["size"] == len(data)

    processed = await wait_until_processed(api, record["id"])
    assert processed["processing"]["status"] == "done"
    assert processed["sha256"] == hashlib.sha256(data).hexdigest()

    response = await api.call("GET", "/files")
    assert response.status == 200
    [listed] = await response.json()
    assert listed["id"] == record["id"]
    assert listed["size"] == len(data)
    assert listed["updating"] is None
    assert listed["name"] == "Quarterly report.pdf"
    assert listed["type"] == "application/pdf"
    assert listed["dir"] == "root"

    response = await api.call("GET", f"/files/{record['id']}/download", allow_redirects=False)
    assert response.status == 302
    async with api.client.session.get(URL(response.headers["Location"], encoded=True)) as got:
        assert got.status == 200
        assert await got.read() == data
        assert "Quarterly%20report.pdf" in got.headers["Content-Disposition"]
