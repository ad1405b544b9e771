"""What a coordinator replica checks against the others before it serves: the same secret key.

Every replica decrypts the git credentials any other one sealed, so all must hold the same
RAAS_SECRET_KEY (or all none). The first replica to start records the key's fingerprint (an
HMAC of a constant under the key: it tells keys apart and reveals nothing of them) in
``cluster_facts``; every later one compares its own and refuses to start, in one line, when they
differ. Changing the key on purpose (all replicas stopped, the stored credentials set again
afterwards): ``raas coordinator --adopt-secret-key`` records the new one.
"""

from __future__ import annotations

import hashlib
import hmac
import logging

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite

from orchestrator.remotes.credentials import configured_key
from shared.db import session_scope
from shared.errors import InvalidInput
from shared.models.cluster import ClusterFact
from shared.settings import Settings

log = logging.getLogger(__name__)
KEY_FACT = "secret_key_fingerprint"
NO_KEY = "none"


def key_fingerprint(settings: Settings) -> str:
    """The fingerprint of this process's RAAS_SECRET_KEY (or RAAS_SECRET_KEY_FILE), ``none`` without one."""
    key = configured_key(settings)
    if key is None:
        return NO_KEY
    return hmac.new(key.encode(), b"raas-secret-key-fingerprint-v1", hashlib.sha256).hexdigest()[:32]


def _difference(mine: str, theirs: str) -> str:
    if theirs == NO_KEY:
        return "RAAS_SECRET_KEY is set on this replica but the other coordinators of this database have none"
    if mine == NO_KEY:
        return (
            "RAAS_SECRET_KEY is not set on this replica but the other coordinators of this database have one"
        )
    return (
        f"RAAS_SECRET_KEY differs from the other coordinators' of this database (fingerprint {mine[:8]}, "
        f"theirs {theirs[:8]})"
    )


def check_secret_key(settings: Settings, *, adopt: bool = False) -> None:
    """Record this replica's key fingerprint if it is the first (or ``adopt``), else compare.

    Raises:
        InvalidInput: the key differs from the one recorded (one line saying how).
    """
    mine = key_fingerprint(settings)
    with session_scope() as session:
        insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
        statement = insert(ClusterFact).values(name=KEY_FACT, value=mine)
        if adopt:
            statement = statement.on_conflict_do_update(
                index_elements=[ClusterFact.name], set_={"value": mine}
            )
        else:
            statement = statement.on_conflict_do_nothing(index_elements=[ClusterFact.name])
        session.execute(statement)
        theirs = session.scalar(select(ClusterFact.value).where(ClusterFact.name == KEY_FACT))
    if adopt:
        log.warning("recorded this replica's RAAS_SECRET_KEY as the one every coordinator must have")
    if theirs is not None and theirs != mine:
        msg = (
            f"{_difference(mine, theirs)}: give every replica the same key (after changing it on all of "
            "them, start one with `raas coordinator --adopt-secret-key`)"
        )
        raise InvalidInput(msg)
