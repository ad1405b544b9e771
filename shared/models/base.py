"""What every model is built on: the declarative base, ids, timestamps, money and enum columns."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum
from typing import Any

from sqlalchemy import JSON, DateTime, Numeric
from sqlalchemy import Enum as SAEnum
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def new_id() -> str:
    return secrets.token_hex(8)


def utcnow() -> datetime:
    return datetime.now(UTC)


Money = Numeric(14, 6)


def enum_column(enum_type: type[Enum]) -> SAEnum:
    # Stored as plain strings so the same migration runs on Postgres and SQLite; 16 characters,
    # or the longest value's length (``waiting_for_approval``).
    length = max(16, *(len(str(m.value)) for m in enum_type))
    return SAEnum(enum_type, native_enum=False, length=length, values_callable=lambda e: [m.value for m in e])


def timestamp(nullable: bool = True) -> Mapped[Any]:
    # Non-nullable timestamps are creation times and default to now.
    return mapped_column(DateTime(timezone=True), nullable=nullable, default=None if nullable else utcnow)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, Decimal: Money}
