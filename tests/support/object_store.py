"""A real S3 API server of one run's own (moto in server mode) on a free loopback port.

The workspace store's tests and benchmark talk to it over HTTP through boto3, exactly as a
coordinator talks to S3, MinIO or R2; only the server is a stand-in. ``AWS_*`` variables with
throwaway credentials are what boto3 (in this process and in the ones it starts) signs with.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from sqlalchemy import select

from shared.db import session_scope
from shared.models.workspaces import WorkspaceHead, WorkspaceIncrement
from tests.support.loopback import listening_process

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "raas-test",
    "AWS_SECRET_ACCESS_KEY": "raas-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class ObjectStoreServer:
    endpoint: str
    proc: subprocess.Popen[bytes]

    def client(self) -> Any:
        return boto3.client("s3", endpoint_url=self.endpoint, **_boto_credentials())

    def make_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> list[str]:
        answer = self.client().list_objects_v2(Bucket=bucket)
        return sorted(item["Key"] for item in answer.get("Contents", []))

    def env(self, bucket: str, prefix: str = "workspaces") -> dict[str, str]:
        """The variables that point a coordinator (or a Settings object) at ``bucket``."""
        return {
            **CREDENTIALS,
            "RAAS_WORKSPACE_STORE": f"s3://{bucket}/{prefix}",
            "RAAS_S3_ENDPOINT_URL": self.endpoint,
        }


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }


def named_keys(database_url: str | None = None, project_id: str | None = None) -> list[str]:
    """The objects the workspace rows name (the heads' bases, the increments' packs), of one
    project or all: what the store must keep, and all it may keep. Read from the tables here, not
    through the store's own code, which is what the tests check."""
    heads, packs = select(WorkspaceHead.object_key), select(WorkspaceIncrement.object_key)
    if project_id is not None:
        heads = heads.where(WorkspaceHead.project_id == project_id)
        packs = packs.where(WorkspaceIncrement.project_id == project_id)
    with session_scope(database_url) as session:
        keys = [*session.scalars(heads), *session.scalars(packs)]
    return sorted(key for key in keys if key is not None)


@contextmanager
def moto_server(start_within_s: float = 30.0) -> Iterator[ObjectStoreServer]:
    """``moto_server`` on 127.0.0.1 while the block runs (its objects live in its memory: stopping
    it loses them, as a wiped bucket would)."""
    os.environ.update(CREDENTIALS)
    binary = Path(sys.executable).with_name("moto_server")
    with listening_process(
        lambda port: [str(binary), "-H", "127.0.0.1", "-p", str(port)],
        "pip install 'moto[server]' (scripts/setup.sh)",
        start_within_s,
    ) as (port, proc):
        yield ObjectStoreServer(f"http://127.0.0.1:{port}", proc)
