"""S3-compatible object storage of daytona-sim: where the SDK uploads Dockerfile build contexts.

Invariant: an object is visible (HEAD/GET) only once its PUT, or the completion of its
multipart upload, has succeeded, and it then holds exactly the bytes sent: a body must match
its `x-amz-content-sha256`, and a completion must name every part it joins with that part's
ETag, in ascending order. Objects live in memory for the life of the server, in one bucket
(`BUCKET`), addressed path-style (`/<bucket>/<key>`).

That is what the SDK's obstore client sends (checked against obstore 0.11 by the tests): HEAD
`<org>/<context hash>/context.tar`, then, if absent, a multipart upload even for a small tar
(POST ?uploads, PUT ?partNumber=&uploadId=, POST ?uploadId=; DELETE ?uploadId= aborts).
Also served: plain PUT and GET. Not served: listing, ranges, versioning, object DELETE.

Signatures are NOT verified: a request only has to name the sim's access key in its SigV4
`Authorization` header and carry the session token; otherwise 403 AccessDenied.

HTTPS only, because obstore refuses plain HTTP and the SDK gives no way to allow it: the
certificate comes from `tls.py`, and a client process must trust `ca_bundle` with
`backends.ca_trust.trust_in_this_process` while it builds snapshots.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from aiohttp import web

from rl_daytona.daytona_sim.tls import BUNDLE, make_server_tls

__all__ = ["BUCKET", "REGION", "ObjectStore", "StoredObject", "context_key"]

BUCKET = "daytona-volume-builds"  # the SDK's default bucket name
REGION = "us-east-1"
MAX_PART = 10_000
_CREDENTIAL = re.compile(r"AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def context_key(organization_id: str, context_hash: str) -> str:
    """Where the SDK puts the tar of one COPY source."""
    return f"{organization_id}/{context_hash}/context.tar"


class S3Error(Exception):
    """An S3 error response: status, code, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class StoredObject:
    data: bytes
    etag: str  # quoted, as S3 sends it
    last_modified: str = field(default_factory=lambda: formatdate(usegmt=True))

    def headers(self) -> dict[str, str]:
        return {"ETag": self.etag, "Last-Modified": self.last_modified,
                "Content-Type": "application/octet-stream"}


@dataclass
class _Upload:
    key: str
    parts: dict[int, StoredObject] = field(default_factory=dict)


def _etag(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


def _xml(root: str, **fields: str) -> web.Response:
    inner = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in fields.items())
    body = f'<?xml version="1.0" encoding="UTF-8"?>\n<{root}>{inner}</{root}>'
    return web.Response(text=body, content_type="application/xml")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _listed_parts(body: bytes) -> list[tuple[int, str]]:
    """(part number, unquoted ETag) of each Part of a CompleteMultipartUpload body."""
    try:
        listed = []
        for part in ET.fromstring(body):
            if _local(part.tag) == "Part":
                fields = {_local(child.tag): (child.text or "").strip() for child in part}
                listed.append((int(fields["PartNumber"]), fields["ETag"].strip('"')))
        return listed
    except (ET.ParseError, KeyError, ValueError):
        raise S3Error(400, "MalformedXML", "the completion body is not a CompleteMultipartUpload") from None


class ObjectStore:
    """One in-memory bucket served over HTTPS on its own port."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.access_key = f"SIM{secrets.token_hex(8).upper()}"
        self.secret_key = secrets.token_hex(20)
        self.session_token = secrets.token_hex(16)
        self.objects: dict[str, StoredObject] = {}
        self._uploads: dict[str, _Upload] = {}
        self._runner: web.AppRunner | None = None
        self.host, self.port = "127.0.0.1", 0

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def ca_bundle(self) -> Path:
        """The CA bundle a client must trust (`backends.ca_trust.trust_in_this_process`); written by `start`."""
        return self.folder / BUNDLE

    def has(self, key: str) -> bool:
        return key in self.objects

    def push_access(self, organization_id: str) -> dict[str, Any]:
        """The body of GET /api/object-storage/push-access (camelCase, as the SDK parses it)."""
        return {"accessKey": self.access_key, "secret": self.secret_key, "sessionToken": self.session_token,
                "storageUrl": self.url, "organizationId": organization_id, "bucket": BUCKET, "region": REGION}

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        context = make_server_tls(self.folder, host)
        app = web.Application(middlewares=[self._errors], client_max_size=64 << 20)
        app.router.add_route("*", "/{bucket}/{key:.+}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=context)
        await site.start()
        self.host, self.port = host, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except S3Error as exc:
            if request.method == "HEAD":
                return web.Response(status=exc.status)
            response = _xml("Error", Code=exc.code, Message=exc.message, Resource=request.path)
            response.set_status(exc.status)
            return response

    def _check_auth(self, request: web.Request) -> None:
        match = _CREDENTIAL.match(request.headers.get("Authorization", ""))
        if (match is None or match.group(1) != self.access_key
                or request.headers.get("x-amz-security-token") != self.session_token):
            raise S3Error(403, "AccessDenied", "unknown access key or session token (get them from push-access)")

    async def _body(self, request: web.Request) -> bytes:
        data = await request.read()
        claimed = request.headers.get("x-amz-content-sha256", "")
        if _HEX64.fullmatch(claimed) and hashlib.sha256(data).hexdigest() != claimed:
            raise S3Error(400, "XAmzContentSHA256Mismatch", "the body does not match x-amz-content-sha256")
        return data

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self._check_auth(request)
        if request.match_info["bucket"] != BUCKET:
            raise S3Error(404, "NoSuchBucket", f"the sim has one bucket, {BUCKET}")
        key, query, method = request.match_info["key"], request.query, request.method
        if method in ("HEAD", "GET"):
            return self._read(key, with_body=method == "GET")
        if method == "PUT" and "uploadId" in query:
            return self._put_part(self._upload(query["uploadId"], key), query.get("partNumber", ""),
                                  await self._body(request))
        if method == "PUT":
            data = await self._body(request)
            self.objects[key] = StoredObject(data, _etag(data))
            return web.Response(headers={"ETag": self.objects[key].etag})
        if method == "POST" and "uploads" in query:
            upload_id = secrets.token_hex(12)
            self._uploads[upload_id] = _Upload(key)
            return _xml("InitiateMultipartUploadResult", Bucket=BUCKET, Key=key, UploadId=upload_id)
        if method == "POST" and "uploadId" in query:
            return self._complete(query["uploadId"], key, await self._body(request))
        if method == "DELETE" and "uploadId" in query:
            self._upload(query["uploadId"], key)
            del self._uploads[query["uploadId"]]
            return web.Response(status=204)
        raise S3Error(501, "NotImplemented", f"daytona-sim's object storage does not serve {method} {request.path_qs}")

    def _read(self, key: str, with_body: bool) -> web.Response:
        found = self.objects.get(key)
        if found is None:
            raise S3Error(404, "NoSuchKey", f"no object {key}")
        headers = found.headers()
        if with_body:
            return web.Response(body=found.data, headers=headers)
        return web.Response(headers={**headers, "Content-Length": str(len(found.data))})

    def _upload(self, upload_id: str, key: str) -> _Upload:
        upload = self._uploads.get(upload_id)
        if upload is None or upload.key != key:
            raise S3Error(404, "NoSuchUpload", f"no multipart upload {upload_id} for {key}")
        return upload

    def _put_part(self, upload: _Upload, number_text: str, data: bytes) -> web.Response:
        if not number_text.isdigit() or not 1 <= int(number_text) <= MAX_PART:
            raise S3Error(400, "InvalidArgument", f"partNumber must be 1..{MAX_PART}, got {number_text!r}")
        part = upload.parts[int(number_text)] = StoredObject(data, _etag(data))
        return web.Response(headers={"ETag": part.etag})

    def _complete(self, upload_id: str, key: str, body: bytes) -> web.Response:
        upload = self._upload(upload_id, key)
        listed = _listed_parts(body)
        numbers = [number for number, _ in listed]
        if not listed or numbers != sorted(set(numbers)):
            raise S3Error(400, "InvalidPartOrder", "parts must be listed once each, in ascending order")
        for number, etag in listed:
            if number not in upload.parts or upload.parts[number].etag != f'"{etag}"':
                raise S3Error(400, "InvalidPart", f"part {number} was not uploaded with ETag {etag}")
        parts = [upload.parts[number] for number in numbers]
        digest = hashlib.md5(b"".join(bytes.fromhex(p.etag.strip('"')) for p in parts)).hexdigest()
        self.objects[key] = StoredObject(b"".join(p.data for p in parts), f'"{digest}-{len(parts)}"')
        del self._uploads[upload_id]
        return _xml("CompleteMultipartUploadResult", Bucket=BUCKET, Key=key, ETag=self.objects[key].etag)
