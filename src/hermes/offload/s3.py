"""Blobs in an S3-compatible bucket (AWS S3, MinIO, Ceph, ...), under ``<prefix><topic>/<message id>``.

A blob is uploaded whole (multipart above 8 MiB, by boto3's transfer manager): S3 makes an object visible only
once its upload completed, so no half-written blob is ever served, and an upload cut short is aborted and leaves
nothing (a bucket lifecycle rule for incomplete multipart uploads covers a crash). Credentials come from boto3's
usual chain (environment, shared files, instance roles); they are never logged."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import Any

from hermes.errors import OffloadedMessageNotFound, StartupError
from hermes.offload.blobs import BlobInfo


class _Chunks(io.RawIOBase):
    """The chunks as a readable file, for the transfer manager: nothing is joined."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._left = memoryview(b"")
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._left = memoryview(chunk)
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        self.size += n
        return n


class S3BlobStore:
    def __init__(
        self, bucket: str, prefix: str = "", endpoint_url: str | None = None, region: str | None = None
    ) -> None:
        try:
            import boto3
        except ImportError:
            raise StartupError("the S3 offload store needs boto3: install hermes-broker[s3]") from None
        self._s3 = boto3.client("s3", endpoint_url=endpoint_url, region_name=region)
        self._bucket = bucket
        self._prefix = prefix

    def put(self, topic: str, blob_id: str, chunks: Iterable[bytes]) -> int:
        source = _Chunks(chunks)
        self._s3.upload_fileobj(io.BufferedReader(source, 1 << 20), self._bucket, self._key(topic, blob_id))
        return source.size

    def info(self, blob_id: str) -> BlobInfo | None:
        from botocore.exceptions import ClientError

        for topic in self.topics():
            try:
                head = self._s3.head_object(Bucket=self._bucket, Key=self._key(topic, blob_id))
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    continue
                raise
            return BlobInfo(topic, blob_id, int(head["ContentLength"]), head["LastModified"].timestamp())
        return None

    def read(self, info: BlobInfo, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        from botocore.exceptions import ClientError

        try:
            body = self._s3.get_object(Bucket=self._bucket, Key=self._key(info.topic, info.blob_id))["Body"]
        except ClientError:
            raise OffloadedMessageNotFound(f"offloaded message {info.blob_id} not found") from None
        with body:
            yield from body.iter_chunks(chunk_size)

    def delete(self, info: BlobInfo) -> None:
        self._s3.delete_object(Bucket=self._bucket, Key=self._key(info.topic, info.blob_id))

    def topics(self) -> list[str]:
        pages = self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self._bucket, Prefix=self._prefix, Delimiter="/"
        )
        return [p["Prefix"][len(self._prefix) : -1] for page in pages for p in page.get("CommonPrefixes", [])]

    def expire(self, topic: str, stored_before: float) -> int:
        return self._delete_where(topic, lambda item: item["LastModified"].timestamp() < stored_before)

    def delete_topic(self, topic: str) -> None:
        self._delete_where(topic, lambda _: True)

    def _delete_where(self, topic: str, condition: Any) -> int:
        pages = self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self._bucket, Prefix=f"{self._prefix}{topic}/"
        )
        deleted = 0
        for page in pages:
            keys = [{"Key": item["Key"]} for item in page.get("Contents", []) if condition(item)]
            if keys:  # at most 1,000 a page, as delete_objects takes
                self._s3.delete_objects(Bucket=self._bucket, Delete={"Objects": keys, "Quiet": True})
                deleted += len(keys)
        return deleted

    def _key(self, topic: str, blob_id: str) -> str:
        return f"{self._prefix}{topic}/{blob_id}"
