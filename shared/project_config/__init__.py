"""A project's own settings: ``raas.toml`` in its directory, validated by pydantic.

Every table has ``extra="forbid"`` so a misspelt key is an error that names it, not a setting
silently ignored. What it holds: the ``tables`` (one model per ``[table]``), the ``project``
(:class:`ProjectConfig`, the whole file and the rules across its tables) and ``parse`` (text to
a config, and one-line errors). Import from here: the names below are the package's public face
(a test pins them).
"""

from shared.project_config.parse import describe_validation_error, parse_project_config
from shared.project_config.project import DEFAULT_IGNORE, ProjectConfig
from shared.project_config.tables import (
    BreakerConfig,
    BudgetConfig,
    DeliveryConfig,
    MemoryConfig,
    RateLimitConfig,
    SandboxConfig,
    SourceConfig,
)

__all__ = [
    "DEFAULT_IGNORE",
    "BreakerConfig",
    "BudgetConfig",
    "DeliveryConfig",
    "MemoryConfig",
    "ProjectConfig",
    "RateLimitConfig",
    "SandboxConfig",
    "SourceConfig",
    "describe_validation_error",
    "parse_project_config",
]
