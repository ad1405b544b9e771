"""The object store behind RAAS_WORKSPACE_STORE: a bucket and a key prefix on any S3-compatible
server (S3, R2, MinIO, Ceph), reached with boto3 and the usual AWS_* credentials.

Objects are immutable: every write of a workspace puts a new key, so a reader never sees half
of one and a crash between the upload and the database pointer leaves an orphan, not a hole.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from shared.errors import InvalidInput, ServiceUnavailable
from shared.settings import Settings


class ObjectMissing(Exception):
    """The object is gone: a newer write replaced it and deleted it (read the pointer again)."""


@dataclass(frozen=True)
class Location:
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Location:
        """``s3://bucket/prefix`` (the prefix may be empty)."""
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            msg = f"RAAS_WORKSPACE_STORE={url!r} is not s3://bucket/prefix"
            raise InvalidInput(msg)
        return cls(parts.netloc, parts.path.strip("/"))

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name


class Bucket:
    """One bucket's objects, as files in and out."""

    def __init__(self, location: Location, endpoint_url: str | None, *, timeout_s: float = 30.0) -> None:
        self.location = location
        self.endpoint = endpoint_url or "AWS S3"
        config = Config(
            connect_timeout=min(timeout_s, 5.0),
            read_timeout=timeout_s,
            retries={"max_attempts": 3, "mode": "standard"},
            # A bundle carries its own checksum (git verifies it); a second one in Python per
            # request is time on every write. S3 still checks what SigV4 signs.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        self._client: Any = boto3.client("s3", endpoint_url=endpoint_url, config=config)

    @classmethod
    def from_settings(cls, settings: Settings, *, timeout_s: float = 30.0) -> Bucket:
        return cls(
            Location.parse(settings.workspace_store or ""), settings.s3_endpoint_url, timeout_s=timeout_s
        )

    def put(self, key: str, source: Path | bytes) -> None:
        """Store a file's or the given bytes under ``key``."""
        if isinstance(source, bytes):
            self._call("put_object", Bucket=self.location.bucket, Key=key, Body=source)
            return
        with source.open("rb") as body:
            self._call("put_object", Bucket=self.location.bucket, Key=key, Body=body)

    def get(self, key: str, dest: Path) -> None:
        """Copy the object to ``dest``.

        Raises:
            ObjectMissing: there is no such object.
        """
        try:
            answer = self._client.get_object(Bucket=self.location.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise ObjectMissing(key) from exc
            raise self._unavailable(exc) from exc
        except BotoCoreError as exc:
            raise self._unavailable(exc) from exc
        with dest.open("wb") as out:
            shutil.copyfileobj(answer["Body"], out, 1024 * 1024)

    def listing(self, prefix: str) -> Iterator[tuple[str, datetime]]:
        """Every key under ``prefix`` and when its object was written."""
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.location.bucket, Prefix=prefix
        )
        try:
            for page in pages:
                for item in page.get("Contents", []):
                    yield item["Key"], item["LastModified"]
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable(exc) from exc

    def delete(self, key: str) -> None:
        self._call("delete_object", Bucket=self.location.bucket, Key=key)

    def check(self) -> None:
        """Raise, in one line naming the endpoint and what to do, unless the bucket answers."""
        where = f"s3://{self.location.bucket} at {self.endpoint}"
        try:
            self._client.head_bucket(Bucket=self.location.bucket)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchBucket"):
                msg = f"workspace store: bucket {where} does not exist; create it or fix RAAS_WORKSPACE_STORE"
                raise InvalidInput(msg) from exc
            msg = f"workspace store: {where} refused access ({code}); check the AWS_* credentials"
            raise InvalidInput(msg) from exc
        except NoCredentialsError as exc:
            msg = f"workspace store: no credentials for {where}; set AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY"
            raise InvalidInput(msg) from exc
        except BotoCoreError as exc:
            msg = (
                f"workspace store: {where} does not answer ({exc}); start it or fix "
                "RAAS_S3_ENDPOINT_URL / RAAS_WORKSPACE_STORE"
            )
            raise ServiceUnavailable(msg) from exc

    def _call(self, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._client, operation)(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: Exception) -> ServiceUnavailable:
        msg = f"workspace store s3://{self.location.bucket} at {self.endpoint}: {exc}"
        return ServiceUnavailable(msg)
