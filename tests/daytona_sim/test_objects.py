"""daytona-sim's object storage, driven by the SDK's own uploader and by obstore (what it sends)."""

from __future__ import annotations

import hashlib
import io
import os
import ssl
import tarfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import aiohttp
import pytest
from daytona._async.object_storage import AsyncObjectStorage
from obstore.store import S3Store

from rl_daytona.backends.ca_trust import CERT_ENV, trust_in_this_process
from rl_daytona.daytona_sim.objects import BUCKET, REGION, ObjectStore, context_key
from rl_daytona.daytona_sim.state import ORG_ID
from tests.daytona_sim.conftest import run


@asynccontextmanager
async def started(root: Path) -> AsyncIterator[ObjectStore]:
    store = ObjectStore(root / "object-storage")
    await store.start()
    try:
        yield store
    finally:
        await store.stop()


def _s3(store: ObjectStore, access_key: str | None = None) -> S3Store:
    """An obstore client built the way the SDK builds it (call inside `trust_in_this_process`)."""
    return S3Store(bucket=BUCKET, endpoint=store.url, region=REGION, access_key_id=access_key or store.access_key,
                   secret_access_key=store.secret_key, session_token=store.session_token,
                   retry_config={"max_retries": 0})


def test_the_sdk_uploader_heads_then_uploads_a_context_tar_once(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print('hi')\n")

    async def go() -> None:
        async with started(tmp_path) as store:
            access = store.push_access(ORG_ID)
            assert access["storageUrl"].startswith("https://") and access["bucket"] == BUCKET
            with trust_in_this_process(store.ca_bundle):
                uploader = AsyncObjectStorage(access["storageUrl"], access["accessKey"], access["secret"],
                                              access["sessionToken"], access["bucket"], region=access["region"])
                first = await uploader.upload(str(tmp_path / "app"), ORG_ID, "app")
                stored = store.objects[context_key(ORG_ID, first)]
                assert await uploader.upload(str(tmp_path / "app"), ORG_ID, "app") == first
            assert store.objects[context_key(ORG_ID, first)] is stored  # found by HEAD: not sent again
            with tarfile.open(fileobj=io.BytesIO(stored.data)) as tar:
                member = tar.extractfile("app/main.py")
                assert member is not None and member.read() == b"print('hi')\n"
            assert stored.etag.endswith('-1"')  # obstore uploads even a small tar in parts
    run(go())


def test_a_large_upload_arrives_in_parts_and_reads_back(tmp_path: Path) -> None:
    payload = os.urandom(6 * 1024 * 1024 + 123)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(payload), 1 << 20):
            yield payload[start:start + (1 << 20)]

    async def go() -> None:
        async with started(tmp_path) as store:
            with trust_in_this_process(store.ca_bundle):
                client = _s3(store)
            await client.put_async("org/big/context.tar", chunks(), chunk_size=5 * 1024 * 1024, max_concurrency=4)
            assert store.objects["org/big/context.tar"].etag.endswith('-2"')
            assert bytes(await (await client.get_async("org/big/context.tar")).bytes_async()) == payload
            meta = await client.head_async("org/big/context.tar")
            assert meta["size"] == len(payload)
            with pytest.raises(FileNotFoundError):
                await client.head_async("org/none/context.tar")
    run(go())


def test_a_client_needs_the_sims_ca_and_its_access_key(tmp_path: Path) -> None:
    async def go() -> None:
        async with started(tmp_path) as store:
            with pytest.raises(Exception, match="(?i)certificate|UnknownIssuer"):
                await _s3(store).head_async("org/x/context.tar")  # built without trusting the sim's CA
            before = os.environ.get(CERT_ENV)
            with trust_in_this_process(store.ca_bundle):
                stranger = _s3(store, access_key="AKIASTRANGER")
            assert os.environ.get(CERT_ENV) == before
            with pytest.raises(Exception, match="403"):
                await stranger.put_async("org/x/context.tar", b"data")
            assert store.objects == {}
    run(go())


def _signed(store: ObjectStore, body: bytes = b"", claimed: str | None = None) -> dict[str, str]:
    """Headers obstore would send, minus a real signature (the sim does not verify it)."""
    return {"Authorization": f"AWS4-HMAC-SHA256 Credential={store.access_key}/20260101/{REGION}/s3/aws4_request, "
                             "SignedHeaders=host, Signature=00",
            "x-amz-security-token": store.session_token,
            "x-amz-content-sha256": claimed or hashlib.sha256(body).hexdigest()}


def test_bodies_must_match_their_hash_and_completions_their_parts(tmp_path: Path) -> None:
    async def go() -> None:
        async with started(tmp_path) as store:
            tls = ssl.create_default_context(cafile=str(store.ca_bundle))
            url = f"{store.url}/{BUCKET}/org/h/context.tar"
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls)) as http:
                async with http.put(url, data=b"abc", headers=_signed(store, claimed="0" * 64)) as bad:
                    assert bad.status == 400 and "XAmzContentSHA256Mismatch" in await bad.text()
                async with http.post(url + "?uploads", headers=_signed(store)) as made:
                    upload_id = (await made.text()).split("<UploadId>")[1].split("<")[0]
                async with http.put(f"{url}?partNumber=1&uploadId={upload_id}", data=b"abc",
                                    headers=_signed(store, b"abc")) as part:
                    assert part.status == 200
                wrong = (b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"ffff\"</ETag>"
                         b"</Part></CompleteMultipartUpload>")
                async with http.post(f"{url}?uploadId={upload_id}", data=wrong, headers=_signed(store, wrong)) as done:
                    assert done.status == 400 and "InvalidPart" in await done.text()
                async with http.delete(f"{url}?uploadId={upload_id}", headers=_signed(store)) as aborted:
                    assert aborted.status == 204
                async with http.put(f"{url}?partNumber=2&uploadId={upload_id}", data=b"x",
                                    headers=_signed(store, b"x")) as late:
                    assert late.status == 404 and "NoSuchUpload" in await late.text()
                async with http.get(f"{store.url}/other-bucket/k", headers=_signed(store)) as other:
                    assert other.status == 404 and "NoSuchBucket" in await other.text()
            assert store.objects == {}
    run(go())
