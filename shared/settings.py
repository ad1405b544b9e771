"""Service settings, read once from the environment (prefix ``RAAS_``).

A project's own settings live in its ``raas.toml`` (see :mod:`shared.project_config`); these
are the settings of the machine a coordinator or worker runs on.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.errors import InvalidInput

# Good enough on loopback; the coordinator refuses to listen anywhere else with it.
DEV_TOKEN = "dev-token"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAAS_", extra="ignore")

    database_url: str = Field(
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        description="SQLAlchemy URL of the database (Postgres via psycopg 3, or sqlite:///path).",
    )
    broker_url: str = Field(default="redis://127.0.0.1:6379/0", description="Celery broker URL.")
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0", description="Redis for event pub/sub and rate limits."
    )
    coordinator_url: str = Field(
        default="http://127.0.0.1:8700", description="Where the CLI and the workers reach the coordinator."
    )
    api_token: SecretStr = Field(
        default=SecretStr(DEV_TOKEN),
        description="Bearer token the coordinator requires and the CLI and workers send.",
    )
    data_dir: Path = Field(
        default=Path.home() / ".local" / "share" / "raas",
        description="Where the coordinator keeps workspaces and the worker its scratch copies.",
    )
    sandbox_image: str = Field(
        default="constellation-sandbox:bookworm", description="Docker image every iteration runs in."
    )
    sandbox: Literal["auto", "docker", "local"] = Field(
        default="auto",
        description="Where `raas run` executes tools: docker, local (no isolation), or auto "
        "(docker when an engine answers and has the image, else local).",
    )
    sandbox_network_allowed: bool = Field(
        default=True,
        description="Whether projects may set [sandbox] network = true (turn off for untrusted tenants).",
    )
    snapshot_registry: str | None = Field(
        default=None,
        pattern=r"^$|^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+$",
        description="Repository in a registry for environment snapshots (e.g. 127.0.0.1:5000/raas-env): a "
        "worker pushes each snapshot it builds there and pulls one it lacks before running a setup; a "
        "failing registry is logged and the setup runs locally. Logins: docker's own (`docker login`). "
        "Unset or empty: each worker host builds its own.",
    )
    harness_cache: Path = Field(
        default=Path("/var/cache/constellation/harnesses"),
        description="Where scripts/install-harnesses.sh puts the pinned agent CLIs (one NAME-VERSION "
        "directory each); a worker mounts them read-only into its containers.",
    )
    worker_harnesses: list[str] = Field(
        default_factory=list,
        description='Harnesses a worker must be able to run (a JSON list, e.g. ["claude-code"]; '
        "`raas worker --harnesses` wins): it refuses to start if one's binary is missing.",
    )
    warm_pool_size: int = Field(
        default=0, ge=0, description="Pre-started sandboxes per worker process (0: start one per iteration)."
    )
    task_container_idle_s: float = Field(
        default=60.0,
        ge=0,
        description="How long a task's container waits, idle, for the task's next iteration on the same "
        "worker process, which then reuses it (same filesystem, fresh agent context); 0: every iteration "
        "starts a container of its own.",
    )
    route_wait_s: float = Field(
        default=2.0,
        ge=0,
        description="How long a task's next iteration waits on the queue of the worker holding the task's "
        "container before any worker may take it from the shared queue.",
    )
    sandbox_engine_calls: int | None = Field(
        default=None,
        ge=1,
        description="Sandbox creates and removals a worker process has the Docker engine do at once (more "
        "wait their turn); unset: twice the host's cores. Past a few, parallel container starts cost the "
        "engine and the kernel more CPU per container and start none sooner.",
    )
    harness_timeout_s: float = Field(
        default=3600.0,
        gt=0,
        description="Wall-clock limit of one harness iteration's agent CLI run: past it the container is "
        "killed and what the agent wrote is kept.",
    )
    harness_on_host: bool = Field(
        default=False,
        description="Let a harness (an agent CLI) run without Docker, on the local sandbox, with the host "
        "user's privileges (embedded runs only).",
    )
    worker_name: str = Field(
        default="",
        description="The worker's Celery node name (`raas worker --name` wins); empty: iterations@HOST.",
    )
    mcp_allowed_origins: list[str] = Field(
        default_factory=list,
        description="Origins (scheme://host[:port], a JSON list) whose pages may call the coordinator's "
        "/mcp endpoint. A request with any other Origin header is refused (403): browsers send one "
        "cross-origin, MCP clients that are not browsers send none.",
    )
    flower_url: str | None = Field(
        default=None,
        description="Flower's address (http or https), linked from the dashboard's workers page; "
        "unset: no link.",
    )
    db_pool_size: int | None = Field(
        default=None,
        ge=1,
        description="Database connections a process keeps for reuse (opened as needed); unset: 5, or a "
        "threads worker's concurrency. A threads worker refuses to start with fewer than its concurrency "
        "in this plus RAAS_DB_MAX_OVERFLOW.",
    )
    db_max_overflow: int = Field(
        default=10, ge=0, description="Connections a process may open beyond RAAS_DB_POOL_SIZE when busy."
    )
    heartbeat_interval_s: float = Field(default=5.0, description="How often a running iteration beats.")
    max_iteration_attempts: int = Field(
        default=3, description="An iteration whose worker died this many times is failed, not re-run."
    )
    requeue_after_s: float = Field(
        default=300.0,
        description="A queued iteration not started after this (or a pending delivery not done) is sent to "
        "the broker again. A coordinator that starts sends them all at once: their messages may have been "
        "lost with the one before it.",
    )
    reconcile_interval_s: float = Field(default=10.0, description="How often the reconcile loop runs.")
    lease_s: float = Field(
        default=10.0,
        ge=1,
        description="How long a coordinator replica holds the reconcile lease without renewing it (it renews "
        "every quarter of this). When its holder dies, another replica takes the lease within 1.25 times "
        "this and starts with a resuming pass.",
    )
    drain_s: float = Field(
        default=0.0,
        ge=0,
        description="How long a stopping coordinator keeps answering, with GET /readyz at 503, so that its "
        "load balancer stops sending it requests first (a few health-check intervals; compose.yaml and "
        "the Kubernetes manifests set it).",
    )
    sandbox_sweep_interval_s: float = Field(
        default=30.0,
        gt=0,
        description="How often a worker removes the sandbox containers of iterations that no longer run "
        "(a killed worker's).",
    )
    no_workers_after_s: float = Field(
        default=60.0,
        ge=0,
        description="Iterations waiting this long with no live worker on the iterations queue are "
        "reported: a no_workers event, a line in `raas status`, the raas_projects_waiting_for_worker gauge.",
    )
    llm_retry_budget_s: float = Field(
        default=60.0,
        gt=0,
        description="How long a model call of the built-in loop keeps retrying after its first failure "
        "(attempts and waits together; at most 10 attempts either way) before its iteration fails, so a "
        "model that stays unreachable reaches the circuit breaker in minutes. Each retry is an llm_retry "
        "event; the iteration's error says how many attempts were made.",
    )
    rate_requests_per_minute: int | None = Field(
        default=None, description="The API key's request limit, enforced across all workers."
    )
    rate_input_tokens_per_minute: int | None = Field(
        default=None, description="The API key's input-token limit, enforced across all workers."
    )
    rate_output_tokens_per_minute: int | None = Field(
        default=None, description="The API key's output-token limit, enforced across all workers."
    )
    heartbeat_stale_s: float = Field(
        default=30.0,
        description="A running iteration whose heartbeat is older than this has lost its worker.",
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description="Fernet key (`python -c 'from cryptography.fernet import Fernet; "
        "print(Fernet.generate_key().decode())'`) the coordinator encrypts tenants' git credentials "
        "with; unset (and no RAAS_SECRET_KEY_FILE): `raas credentials set` is refused.",
    )
    secret_key_file: Path | None = Field(
        default=None, description="A file holding that key instead (e.g. a mounted Kubernetes secret)."
    )
    approval_link_secret: SecretStr | None = Field(
        default=None,
        description="The key that signs the approve/reject links in an approval's notification; unset: "
        "one derived from RAAS_API_TOKEN. Changing it voids the links already sent.",
    )
    approval_link_ttl_s: float = Field(
        default=72 * 3600.0,
        gt=0,
        description="How long an approval link in a notification works (it works once: the approval is "
        "decided once).",
    )
    notify_interval_s: float = Field(
        default=2.0,
        gt=0,
        description="How often a coordinator's notification sender looks for notifications due "
        "(`raas notify`).",
    )
    notify_backoff_s: float = Field(
        default=5.0,
        gt=0,
        description="How long a notification waits after its first failed attempt; the wait doubles after "
        "each further one, up to RAAS_NOTIFY_BACKOFF_MAX_S.",
    )
    notify_backoff_max_s: float = Field(
        default=3600.0, gt=0, description="The longest wait between two attempts of a notification."
    )
    notify_retry_for_s: float = Field(
        default=86400.0,
        gt=0,
        description="How long after its event a notification is still tried; then it is given up (failed).",
    )
    notify_pause_after: int = Field(
        default=15,
        ge=1,
        description="Failed attempts in a row after which a subscription's endpoint counts as dead: it is "
        "paused (`raas notify ls` says why) until `raas notify resume`.",
    )
    dashboard_idle_s: float = Field(
        default=7200.0,
        gt=0,
        description="How long a dashboard session may go unused before it ends (the next request "
        "asks to sign in again); signing out ends it at once.",
    )
    workspace_store: str | None = Field(
        default=None,
        pattern=r"^$|^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/-]*)?$",
        description="Where the coordinators keep the projects' workspaces: s3://bucket/prefix (an "
        "S3-compatible object store every replica reaches; credentials from the usual AWS_* "
        "variables), the data directory's disk only a cache. Unset: the local directory "
        "RAAS_DATA_DIR/workspaces (one coordinator; the embedded mode always uses it).",
    )
    workspace_sweep_s: float = Field(
        default=3600.0,
        gt=0,
        description="How often the reconcile lease's holder deletes the objects of RAAS_WORKSPACE_STORE "
        "that no workspace names (uploads of writes that crashed before committing).",
    )
    s3_endpoint_url: str | None = Field(
        default=None,
        description="The object store's URL for RAAS_WORKSPACE_STORE (MinIO, R2, Ceph...); unset: AWS S3.",
    )
    # Read the way the SDK reads them: no RAAS_ prefix.
    anthropic_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("ANTHROPIC_API_KEY"),
        description="Claude API key; when unset the demo uses the scripted model.",
    )
    anthropic_base_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("ANTHROPIC_BASE_URL"),
        description="Base URL of the Messages API (the scripted model server in tests).",
    )
    openai_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("OPENAI_API_KEY"),
        description="OpenAI API key the LLM gateway sends upstream for Codex's Responses API calls; "
        "it stays in the worker, like the Anthropic key.",
    )
    openai_base_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("OPENAI_BASE_URL"),
        description="Base URL of the Responses API, /v1 included, as the OpenAI SDK reads it (the "
        "scripted model server's URL + /v1 in tests); unset: OpenAI's.",
    )
    gateway_dir: Path | None = Field(
        default=None,
        description="Where a worker makes each iteration's LLM gateway socket directory (bind-mounted "
        "into its container; a worker in a container needs a path the Docker host shares). Unset: a "
        "new directory under the system's temporary directory.",
    )

    @field_validator(
        "anthropic_base_url", "openai_base_url", "workspace_store", "s3_endpoint_url", mode="before"
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # compose passes ANTHROPIC_BASE_URL= through; the SDK would take "" for an address.
        return None if value == "" else value

    def workspaces_dir(self) -> Path:
        return self.data_dir / "workspaces"

    def workspace_cache_dir(self) -> Path:
        """Where a coordinator with RAAS_WORKSPACE_STORE keeps its copies: a cache it can lose."""
        return self.data_dir / "workspace-cache"

    def scratch_dir(self) -> Path:
        return self.data_dir / "scratch"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings, read once per process.

    Raises:
        InvalidInput: a variable has a value that is not allowed (one line naming it).
    """
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = str(first["loc"][0]) if first["loc"] else ""
        name = where if where.isupper() else f"RAAS_{where.upper()}"
        msg = f"{name}: {str(first['msg']).removeprefix('Value error, ')} (got {first.get('input')!r})"
        raise InvalidInput(msg) from exc
