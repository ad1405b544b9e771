"""The runner of every agent CLI: an iteration's gateway lease, its container, its output, its end.

The CLI runs inside the iteration's own container (the binary and the gateway's socket
directory bind-mounted read-only, a tmpfs home, no network), its stdout parsed line by line as
it comes into the project's events, and its end judged by :mod:`workers.runners.cli.ending`. The
gateway, not this session, admits, meters, records and charges every model call: nothing
here counts tokens or money.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from shared.errors import InvalidInput
from shared.harnesses import HARNESSES, check_binary
from shared.models import ErrorKind
from workers.claim import Claim
from workers.gateway import relay
from workers.gateway.server import SOCKET_NAME
from workers.runners.base import Emit, RunFailure, RunResult, StartSandbox
from workers.runners.cli import base, mcp_config
from workers.runners.cli.base import Cli, Parser
from workers.runners.cli.ending import Finished, GatewayVerdict, judge
from workers.sandbox.base import Sandbox
from workers.sandbox.container import SandboxMounts
from workers.sandbox.local import LocalSandbox

log = logging.getLogger(__name__)
NOTE_MAX_BYTES = 64 * 1024


class LlmLease(Protocol):
    """An iteration's hold on the LLM gateway (``Gateway.open``): a socket directory and a token."""

    @property
    def directory(self) -> Path: ...

    @property
    def token(self) -> str: ...

    def stats(self) -> GatewayVerdict: ...

    def close(self) -> None: ...


OpenLease = Callable[[Claim, Emit], LlmLease]
RELAY_SOURCE = Path(relay.__file__)


class CliRunner:
    """Runs ``claim``'s agent with ``cli`` (one module's :class:`~workers.runners.cli.base.Cli`)."""

    def __init__(
        self,
        claim: Claim,
        cli: Cli,
        *,
        workdir: Path,
        cache: Path,
        start_sandbox: StartSandbox,
        open_lease: OpenLease,
        emit: Emit,
        timeout_s: float,
        on_host: bool = False,
    ) -> None:
        self.claim = claim
        self.cli = cli
        self.workdir = workdir
        self.cache = cache
        self.start_sandbox = start_sandbox
        self.open_lease = open_lease
        self.emit = emit
        self.timeout_s = timeout_s
        # Whether the user lets a harness run without Docker, with the host user's privileges.
        self.on_host = on_host

    def run(self) -> RunResult:
        try:
            binary = check_binary(self.cli.name, self.cache)
        except InvalidInput as exc:
            raise RunFailure(ErrorKind.INTERNAL, str(exc)) from exc
        lease = self.open_lease(self.claim, self.emit)
        try:
            inside = base.in_container(self.cli.name)
            read_only = [(str(binary), inside.binary), (str(lease.directory), base.SOCKET_DIR)]
            if self.cli.relayed or mcp_config.offered(self.claim):  # the MCP tools need it
                read_only.append((str(RELAY_SOURCE), inside.relay))
            mounts = SandboxMounts(read_only=tuple(read_only), home=True)
            parser, finished = self._run_cli(mounts, lease, binary)
            note = take_completion_note(self.workdir)
            return judge(parser.end, finished, lease.stats(), self.claim.config.completion_marker, note)
        finally:
            lease.close()

    def _run_cli(self, mounts: SandboxMounts, lease: LlmLease, binary: Path) -> tuple[Parser, Finished]:
        config = self.claim.config.harness_config_for(self.claim.category)
        parser = self.cli.parser()
        sandbox = self.start_sandbox(mounts)
        try:
            places = self._places(sandbox, lease, binary)
            invocation = self.cli.invocation(self.claim, config, lease.token, places)
            process = sandbox.spawn(invocation.argv, invocation.env, self.timeout_s)
            with contextlib.closing(process.lines()) as lines:  # closed also when a feed raises
                for line in lines:
                    for event in parser.feed(line):
                        self.emit(event)
        finally:
            sandbox.close()
        name = self.cli.name
        finished = Finished(name, process.exit_code, process.timed_out, self.timeout_s, process.stderr_tail())
        log.info("iteration %s: %s exited with %s", self.claim.iteration_id, name, process.exit_code)
        return parser, finished

    def _places(self, sandbox: Sandbox, lease: LlmLease, binary: Path) -> base.Places:
        """The container's paths; or the host's, when there is no Docker and the user allows it."""
        if not isinstance(sandbox, LocalSandbox):
            return base.in_container(self.cli.name)
        if not self.on_host:
            raise RunFailure(ErrorKind.INTERNAL, host_refusal(self.cli.name))
        return base.Places(
            binary=str(binary),
            socket=str(lease.directory / SOCKET_NAME),
            home=sandbox.home,
            workspace=sandbox.workspace_path,
            relay=str(RELAY_SOURCE),
            relay_port=_free_port(),
        )


def host_refusal(harness: str) -> str:
    return (
        f"harness {harness} runs only in a Docker sandbox here; start Docker, or set "
        "RAAS_HARNESS_ON_HOST=1 to let it run on this host with your user's privileges"
    )


def check_host_run(harnesses: Iterable[str], local: bool, allowed: bool) -> str | None:
    """Whether an embedded run may start: what it must say on stderr first (None: nothing).

    Raises:
        InvalidInput: an agent CLI would run on the local sandbox and the user did not allow it.
    """
    clis = sorted(name for name in harnesses if name in HARNESSES)  # the ones with a binary
    if not local or not clis:
        return None
    if not allowed:
        raise InvalidInput(host_refusal(clis[0]))
    return (
        f"warning: {', '.join(clis)} runs on this host without a sandbox (RAAS_HARNESS_ON_HOST): "
        "the agent has your user's privileges, files and network"
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def take_completion_note(workdir: Path) -> str | None:
    """What the agent wrote to the completion file, which is then removed (it is no work product).

    The workspace is the agent's: a symlink there (to a host file, say) is never followed, as
    this runs on the host.
    """
    folder = workdir / Path(base.COMPLETION_FILE).parent
    path = workdir / base.COMPLETION_FILE
    try:
        if not stat.S_ISDIR(folder.lstat().st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, NOTE_MAX_BYTES)
    finally:
        os.close(fd)
    path.unlink()
    with contextlib.suppress(OSError):  # the agent keeps other files there: they stay
        folder.rmdir()
    return data.decode(errors="replace")
