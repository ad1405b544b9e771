"""Who owns projects and how they sign in: tenants, their API tokens, their git credentials."""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from sqlalchemy import ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from shared.models.base import Base, enum_column, new_id, timestamp


class Tenant(Base):
    """Who owns projects: a team. Its members' tokens see only its projects."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    submissions_per_hour: Mapped[int] = mapped_column(Integer, default=60)
    created_at: Mapped[datetime] = timestamp(nullable=False)


class ApiToken(Base):
    """A tenant's API token, stored as its SHA-256: a leaked database leaks no usable token."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = timestamp(nullable=False)


class CredentialKind(str, Enum):
    TOKEN = "token"  # HTTPS: a username and a token (or password), given to git's credential helper
    SSH_KEY = "ssh_key"  # a private key, given to ssh through a key file only git's child reads


class GitCredential(Base):
    """A tenant's credential for one git host, encrypted at rest (orchestrator.remotes.credentials):
    the database holds only the Fernet token of the secret, never the secret itself."""

    __tablename__ = "git_credentials"
    __table_args__ = (UniqueConstraint("tenant_id", "host"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    # None: set with the cluster token (operators, embedded runs).
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    # The host as in the remote's URL, with its port when it has one ("git.example.org:8443").
    host: Mapped[str] = mapped_column(String(255))
    kind: Mapped[CredentialKind] = mapped_column(enum_column(CredentialKind))
    username: Mapped[str] = mapped_column(String(200), default="")
    secret_encrypted: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = timestamp(nullable=False)
    updated_at: Mapped[datetime] = timestamp(nullable=False)


class DashboardSession(Base):
    """A dashboard sign-in, held on the server so that it can end: signing out deletes the row
    (a copied cookie then answers 401), and one idle for longer than RAAS_DASHBOARD_IDLE_S is
    refused. The cookie holds a random secret; the row its SHA-256 (a leaked database signs no
    one in) and the API token's hash (a deleted token ends its sessions)."""

    __tablename__ = "dashboard_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    """SHA-256 of the cookie's secret, hex."""
    # None: signed in with the cluster token.
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    token_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = timestamp(nullable=False)
    last_seen_at: Mapped[datetime] = timestamp(nullable=False)
