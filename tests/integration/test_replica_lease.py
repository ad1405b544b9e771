"""Coordinator replicas: the reconcile lease has one holder at a time and changes hands when its
holder stops renewing it or gives it back; a replica refuses to start on a database newer than its
code, or with another RAAS_SECRET_KEY than the replicas before it, in one line.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from cryptography.fernet import Fernet
from pydantic import SecretStr
from sqlalchemy import create_engine, text

from orchestrator.scheduling.lease import DatabaseLease, Holding, request_resume
from orchestrator.scheduling.reconcile import Reconciler, ReconcileReport
from orchestrator.service.cluster import check_secret_key
from shared.errors import InvalidInput
from shared.events import NullBus
from shared.migrate import alembic_config, upgrade
from shared.settings import get_settings
from tests.support.bad_input import assert_one_line_error
from tests.support.coordinator import RecordingDispatcher, migrated_template, sqlite_database
from tests.support.loopback import free_port
from tests.support.stack import RAAS

pytestmark = pytest.mark.integration
LEASE_S = 1.0


def _name() -> str:
    return f"test-{secrets.token_hex(4)}"


def test_one_replica_holds_the_lease_until_it_expires_then_another_takes_it(database_url: str) -> None:
    # Given replica A holding a lease of one second, replica B wanting it
    name = _name()
    a, b = DatabaseLease(name, LEASE_S), DatabaseLease(name, LEASE_S)
    assert a.renew() is Holding.TAKEN
    assert a.renew() is Holding.KEPT
    assert b.renew() is None
    taken_epoch = a.epoch

    # When A stops renewing (as if killed), B keeps asking
    deadline = time.monotonic() + 10 * LEASE_S
    while (holding := b.renew()) is None and time.monotonic() < deadline:
        time.sleep(LEASE_S / 10)

    # Then B takes it, in a new epoch, and A, back, finds it lost
    assert holding is Holding.TAKEN
    assert taken_epoch is not None
    assert b.epoch == taken_epoch + 1
    assert a.renew() is None
    assert a.epoch is None
    assert b.renew() is Holding.KEPT


def test_a_lease_given_back_is_taken_by_the_next_replica_at_once(database_url: str) -> None:
    name = _name()
    a, b = DatabaseLease(name, 60.0), DatabaseLease(name, 60.0)
    assert a.renew() is Holding.TAKEN
    assert b.renew() is None

    a.release()

    assert b.renew() is Holding.TAKEN  # not 60 s later


def test_a_starting_replica_asks_the_holder_for_one_resuming_pass(database_url: str) -> None:
    name = _name()
    holder = DatabaseLease(name, 60.0)
    assert holder.renew() is Holding.TAKEN
    assert holder.renew() is Holding.KEPT

    request_resume(name)

    assert holder.renew() is Holding.TAKEN  # the reconcile loop resumes on TAKEN
    assert holder.renew() is Holding.KEPT


def _start(database_url: str, tmp_path: Path, key: str | None) -> subprocess.CompletedProcess[str]:
    env = {"RAAS_DATABASE_URL": database_url, "RAAS_DATA_DIR": str(tmp_path / "data")}
    if key is not None:
        env["RAAS_SECRET_KEY"] = key
    command = [*RAAS, "coordinator", "--port", str(free_port())]
    environment = {k: v for k, v in os.environ.items() if k != "RAAS_SECRET_KEY"}
    return subprocess.run(command, env={**environment, **env}, capture_output=True, text=True, timeout=60)


def test_a_replica_refuses_a_database_whose_schema_is_newer_than_its_code(tmp_path: Path) -> None:
    # Given a database migrated by a newer release
    url = f"sqlite:///{tmp_path / 'raas.db'}"
    upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))

    # When a replica of this release starts against it
    result = _start(url, tmp_path, key=None)

    # Then it refuses in one line naming the revision, and leaves the database as it was
    assert_one_line_error(result, "newer than this code", "0099_from_the_future")
    with engine.connect() as conn:
        assert (
            conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0099_from_the_future"
        )
    engine.dispose()
    with pytest.raises(InvalidInput, match="newer than this code"):
        upgrade(url)


def test_a_replica_with_another_secret_key_than_the_others_refuses_to_start(tmp_path: Path) -> None:
    theirs, other = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    with sqlite_database(migrated_template(tmp_path), tmp_path / "raas.db") as url:
        # Given replicas running with a key (the first recorded its fingerprint)
        settings = get_settings().model_copy(update={"secret_key": SecretStr(theirs)})
        check_secret_key(settings)
        check_secret_key(settings)  # the same key again: no complaint

        # When replicas start with another key, or none
        different = _start(url, tmp_path, key=other)
        missing = _start(url, tmp_path, key=None)

        # Then each refuses in one line saying which
        assert_one_line_error(different, "RAAS_SECRET_KEY differs from the other coordinators'")
        assert_one_line_error(missing, "RAAS_SECRET_KEY is not set on this replica")
        assert theirs not in different.stderr
        assert other not in different.stderr

        # and a key changed on purpose is adopted, after which the old one is the odd one out
        check_secret_key(settings.model_copy(update={"secret_key": SecretStr(other)}), adopt=True)
        with pytest.raises(InvalidInput, match="differs"):
            check_secret_key(settings)
        check_secret_key(settings.model_copy(update={"secret_key": None}), adopt=True)
        with pytest.raises(InvalidInput, match="is set on this replica but the other coordinators"):
            check_secret_key(settings)


def test_replicas_starting_together_migrate_one_at_a_time(database_url: str) -> None:
    # Given an empty database (as at a deployment's first start) and three replicas starting at once
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT")
    name = f"raas_race_{secrets.token_hex(4)}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = database_url.rsplit("/", 1)[0] + f"/{name}"
    try:
        code = f"from shared.migrate import upgrade; upgrade({url!r})"
        procs = [
            subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
            for _ in range(3)
        ]
        errors = [proc.communicate(timeout=120)[1] for proc in procs]

        # Then each one's migration succeeds (the others wait for the first) and the schema is at the head
        assert [proc.returncode for proc in procs] == [0, 0, 0], errors
        engine = create_engine(url)
        with engine.connect() as conn:
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        assert version == ScriptDirectory.from_config(alembic_config(url)).get_current_head()
        engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


class _CountingReconciler(Reconciler):
    """The real loop and lease; each pass only recorded (whether it resumed)."""

    def __init__(self) -> None:
        super().__init__(
            get_settings().model_copy(update={"reconcile_interval_s": 0.1}), RecordingDispatcher(), NullBus()
        )
        self.passes: list[bool] = []

    def run_once(self, now: datetime | None = None, *, resume: bool = False) -> ReconcileReport:
        self.passes.append(resume)
        return ReconcileReport()


def test_only_the_holder_reconciles_and_the_next_one_starts_with_a_resuming_pass(database_url: str) -> None:
    # Given two replicas' reconcile loops under one lease
    name = _name()
    first, second = _CountingReconciler(), _CountingReconciler()
    stops = {id(first): threading.Event(), id(second): threading.Event()}
    threads = [
        threading.Thread(target=r.loop, args=(stops[id(r)], DatabaseLease(name, LEASE_S)), daemon=True)
        for r in (first, second)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while len(first.passes) + len(second.passes) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)

    # Then one of them runs passes, the first of which resumed, and the other none
    holder, other = (first, second) if first.passes else (second, first)
    assert other.passes == []
    assert holder.passes[0] is True
    assert set(holder.passes[1:]) == {False}

    # When the holder stops (gives the lease back), the other takes over with a resuming pass
    stops[id(holder)].set()
    threads[0 if holder is first else 1].join(timeout=10)
    deadline = time.monotonic() + 10
    while not other.passes and time.monotonic() < deadline:
        time.sleep(0.05)
    stops[id(other)].set()
    assert other.passes[:1] == [True]
