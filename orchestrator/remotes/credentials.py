"""Tenants' git credentials: stored encrypted, handed to git only through its credential helper.

A credential is an HTTPS username and token (or password) or an SSH private key, one per tenant
and host. The database holds only its Fernet token, encrypted with the operator's key
(RAAS_SECRET_KEY or RAAS_SECRET_KEY_FILE): without a key nothing is stored. The secret reaches git
through the environment of that one git process (read by a credential helper given with ``-c``,
or an SSH key file only it is told of), never through the remote URL, which git would write into
config files and print in its errors; messages name the host, never the secret.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import select
from sqlalchemy.orm import Session

from shared.errors import InvalidInput, NotFound
from shared.models import CredentialKind, GitCredential, utcnow
from shared.settings import Settings

MAX_SECRET_BYTES = 16_384
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})(:\d{1,5})?$")
# The helper answers git's "get" with the username and secret of the git process's environment,
# and only for the credential's own host: a redirect to another host gets nothing.
_HELPER = (
    '!f() { test "$1" = get || exit 0; h=; while IFS= read -r l; do case "$l" in host=*) h="${l#host=}";; '
    'esac; done; test "$(printf %s "$h" | tr A-Z a-z)" = "$RAAS_GIT_HOST" || exit 0; '
    'printf "username=%s\\npassword=%s\\n" "$RAAS_GIT_USERNAME" "$RAAS_GIT_SECRET"; }; f'
)


@dataclass(frozen=True)
class Credential:
    """A decrypted credential, alive only while a git command runs; its repr hides the secret."""

    host: str
    kind: CredentialKind
    username: str
    secret: str = field(repr=False)


def configured_key(settings: Settings) -> str | None:
    """RAAS_SECRET_KEY, or the contents of RAAS_SECRET_KEY_FILE; None when neither is set.

    Raises:
        InvalidInput: the file cannot be read.
    """
    if settings.secret_key is not None:
        return settings.secret_key.get_secret_value() or None
    if settings.secret_key_file is None:
        return None
    try:
        return settings.secret_key_file.read_text(encoding="utf-8").strip() or None
    except OSError as exc:
        msg = f"RAAS_SECRET_KEY_FILE: cannot read {settings.secret_key_file} ({exc.strerror})"
        raise InvalidInput(msg) from exc


def _fernet(settings: Settings) -> Fernet:
    """The operator's key.

    Raises:
        InvalidInput: no key is configured, or it is not a Fernet key (the message says how to set one).
    """
    key = configured_key(settings)
    if not key:
        msg = (
            "git credentials are stored encrypted and this coordinator has no key: set RAAS_SECRET_KEY "
            "(or RAAS_SECRET_KEY_FILE) to a key from `python -c 'from cryptography.fernet import "
            "Fernet; print(Fernet.generate_key().decode())'` and restart it"
        )
        raise InvalidInput(msg)
    try:
        return Fernet(key.encode())
    except ValueError as exc:
        msg = "RAAS_SECRET_KEY is not a Fernet key (32 url-safe base64-encoded bytes); generate one"
        raise InvalidInput(msg) from exc


def seal(settings: Settings, secret: str) -> str:
    """``secret`` encrypted with the operator's key (a webhook's or a mail server's secret).

    Raises:
        InvalidInput: no key is configured (see :func:`_fernet`).
    """
    return _fernet(settings).encrypt(secret.encode()).decode()


def unseal(settings: Settings, token: str, what: str) -> str:
    """The secret :func:`seal` encrypted.

    Raises:
        InvalidInput: the coordinator's key cannot decrypt it (the key changed); names ``what``.
    """
    try:
        return _fernet(settings).decrypt(token.encode()).decode()
    except InvalidToken as exc:
        msg = f"the secret of {what} cannot be decrypted with this coordinator's key; set it again"
        raise InvalidInput(msg) from exc


def check_host(host: str) -> str:
    """A host as credentials are keyed: a name or address, with its port if it has one.

    Raises:
        InvalidInput: it is not one (a URL, a path, a user@ prefix).
    """
    if not _HOST.match(host):
        msg = f"{host!r} is not a git host; give the repository URL's host (git.example.org, host:8443)"
        raise InvalidInput(msg)
    return host.lower()


def set_credential(
    session: Session,
    settings: Settings,
    tenant_id: str | None,
    host: str,
    kind: CredentialKind,
    username: str,
    secret: str,
) -> None:
    """Store (or replace) the tenant's credential for ``host``, encrypted.

    Raises:
        InvalidInput: no key is configured, the host is not one, or the secret is empty or too large.
    """
    host = check_host(host)
    if not secret.strip():
        msg = "the credential is empty; give the token or key file's contents"
        raise InvalidInput(msg)
    if len(secret.encode()) > MAX_SECRET_BYTES or "\x00" in secret:
        msg = f"the credential must be text of at most {MAX_SECRET_BYTES} bytes"
        raise InvalidInput(msg)
    if kind is CredentialKind.TOKEN and ("\n" in secret.strip() or "\n" in username):
        msg = "a token is one line; for an SSH key use --ssh-key-file"
        raise InvalidInput(msg)
    if kind is CredentialKind.TOKEN:
        secret = secret.strip()
    encrypted = _fernet(settings).encrypt(secret.encode()).decode()
    row = _row(session, tenant_id, host, lock=True)
    now = utcnow()
    if row is None:
        row = GitCredential(tenant_id=tenant_id, host=host, created_at=now, kind=kind, secret_encrypted="")
        session.add(row)
    row.kind = kind
    row.username = username
    row.secret_encrypted = encrypted
    row.updated_at = now
    session.flush()


def _row(session: Session, tenant_id: str | None, host: str, *, lock: bool = False) -> GitCredential | None:
    owner = GitCredential.tenant_id.is_(None) if tenant_id is None else GitCredential.tenant_id == tenant_id
    query = select(GitCredential).where(owner, GitCredential.host == host)
    return session.scalars(query.with_for_update() if lock else query).first()


def get_credential(
    session: Session, settings: Settings, tenant_id: str | None, host: str
) -> Credential | None:
    """The tenant's credential for ``host``, decrypted; None when it has none.

    Raises:
        InvalidInput: it is stored but the coordinator's key cannot decrypt it (the key changed).
    """
    row = _row(session, tenant_id, host.lower())
    if row is None:
        return None
    try:
        secret = _fernet(settings).decrypt(row.secret_encrypted.encode()).decode()
    except InvalidToken as exc:
        msg = f"the credential for {row.host} cannot be decrypted with this coordinator's key; set it again"
        raise InvalidInput(msg) from exc
    return Credential(host=row.host, kind=row.kind, username=row.username, secret=secret)


def list_credentials(session: Session, tenant_id: str | None) -> list[dict[str, str]]:
    """The tenant's credentials as hosts, kinds and usernames: never the secrets."""
    owner = GitCredential.tenant_id.is_(None) if tenant_id is None else GitCredential.tenant_id == tenant_id
    rows = session.scalars(select(GitCredential).where(owner).order_by(GitCredential.host))
    return [
        {"host": r.host, "kind": r.kind.value, "username": r.username, "updated_at": r.updated_at.isoformat()}
        for r in rows
    ]


def delete_credential(session: Session, tenant_id: str | None, host: str) -> None:
    """Forget the tenant's credential for ``host``.

    Raises:
        NotFound: it has none.
    """
    row = _row(session, tenant_id, host.lower(), lock=True)
    if row is None:
        msg = f"no git credential for {host}"
        raise NotFound(msg)
    session.delete(row)


def scrub(text: str, credential: Credential | None) -> str:
    """``text`` with the secret (and each of its lines) replaced: for git's stderr, defensively."""
    if credential is None:
        return text
    for part in {credential.secret, *credential.secret.splitlines()}:
        if len(part.strip()) >= 4:
            text = text.replace(part.strip(), "***")
    return text


@contextmanager
def git_auth(credential: Credential | None) -> Iterator[tuple[list[str], dict[str, str]]]:
    """The ``-c`` options and environment one git process needs to authenticate with ``credential``.

    Every credential helper the machine configures is reset, and git never prompts: with no
    credential a server asking for one fails the command. An SSH key lives in a private temporary
    file for the duration of the block only.
    """
    options = ["-c", "credential.helper=", "-c", "core.askPass="]
    env = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "SSH_ASKPASS": ""}
    if credential is None:
        yield options, env
        return
    if credential.kind is not CredentialKind.SSH_KEY:
        options += ["-c", f"credential.helper={_HELPER}"]
        env |= {
            "RAAS_GIT_HOST": credential.host,
            "RAAS_GIT_USERNAME": credential.username or "git",
            "RAAS_GIT_SECRET": credential.secret,
        }
        yield options, env
        return
    with tempfile.TemporaryDirectory(prefix="raas-ssh-") as tmp:
        key = Path(tmp) / "key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(credential.secret.rstrip("\n") + "\n")
        command = [
            "ssh",
            "-i",
            str(key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=accept-new",
            "-o",
            f"UserKnownHostsFile={Path(tmp) / 'known_hosts'}",
        ]
        env["GIT_SSH_COMMAND"] = shlex.join(command)
        yield options, env
