"""A real git server on loopback: git's own ``git http-backend`` behind a small threaded HTTP
server with basic auth, so that tests clone, fetch and push over real smart HTTP with real
credentials (the one thing it does not have is TLS).

    with serve_git(tmp_path / "git") as server:
        url = server.create_repo("app", {"README.md": "hello\\n"}, branch="main")
        ...  # clone ``url`` with server.username / server.password
        assert server.branches("app")["raas/p/t"] == sha
        assert server.auth_outcomes() == [...]

Every request is recorded with its auth outcome ("ok", "missing" or "wrong") so a test can show
that a wrong credential was refused with a 401. A test module makes its fixture from
``serve_git`` (see tests/integration/test_git_server.py).
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.support.loopback import QuietHandler, serve_loopback

HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"
# Commits made by the server's own helpers carry fixed names and dates: reproducible shas.
_AUTHOR = {
    "GIT_AUTHOR_NAME": "Repo Owner",
    "GIT_AUTHOR_EMAIL": "owner@example.invalid",
    "GIT_COMMITTER_NAME": "Repo Owner",
    "GIT_COMMITTER_EMAIL": "owner@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


@dataclass(frozen=True)
class Request:
    """One HTTP request the server answered: what was asked and how its credential fared."""

    method: str
    path: str
    username: str | None
    auth: str  # "ok", "missing" (no Authorization header), "wrong" or "anonymous" (let in without one)
    status: int


def git(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    """Run git without the user's or the system's configuration; its stdout, stripped."""
    full_env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        **_AUTHOR,
        **(env or {}),
    }
    done = subprocess.run(["git", *args], cwd=cwd, env=full_env, capture_output=True, text=True)
    if done.returncode:
        msg = f"git {' '.join(args)} failed: {done.stderr.strip()}"
        raise RuntimeError(msg)
    return done.stdout.strip()


@dataclass
class GitServer:
    """Bare repositories under ``root``, served at ``base_url`` to the users in ``users``."""

    root: Path
    base_url: str = ""
    username: str = "alice"
    password: str = field(default_factory=lambda: "tok-" + secrets.token_hex(12))
    users: dict[str, str] = field(default_factory=dict)
    # Anyone may clone and fetch without a credential (a public repository); pushing still needs one.
    anonymous_read: bool = False
    # Anyone may push too (a scratch remote): what ``raas run``, which has no stored credential, can push to.
    anonymous_write: bool = False
    requests: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.users.setdefault(self.username, self.password)

    # -- repositories -------------------------------------------------------------------------

    def path(self, name: str) -> Path:
        return self.root / f"{name}.git"

    def url(self, name: str) -> str:
        """The repository's clone URL, with no credential in it."""
        return f"{self.base_url}/{name}.git"

    def create_repo(
        self,
        name: str,
        files: Mapping[str, str] | None = None,
        *,
        branch: str = "main",
        commits: int = 1,
        extra_branches: Mapping[str, Mapping[str, str]] | None = None,
    ) -> str:
        """A bare repository whose ``branch`` has ``commits`` commits, the last holding ``files``
        (each earlier one a ``HISTORY`` file), push enabled; ``extra_branches`` are branches off
        it with files of their own. Returns its URL."""
        bare = self.path(name)
        git("init", "--quiet", "--bare", f"--initial-branch={branch}", str(bare))
        git("config", "http.receivepack", "true", cwd=bare)
        work = self.root / f".work-{name}"
        git("clone", "--quiet", str(bare), str(work))
        git("checkout", "--quiet", "-b", branch, cwd=work)
        for number in range(1, commits):
            (work / "HISTORY").write_text(f"commit {number}\n")
            git("add", "-A", cwd=work)
            git("commit", "--quiet", "-m", f"history {number}", cwd=work)
        self._write(work, files or {"README.md": f"# {name}\n"})
        git("commit", "--quiet", "--allow-empty", "-m", f"{name} at {branch}", cwd=work)
        git("push", "--quiet", "origin", branch, cwd=work)
        for other, other_files in (extra_branches or {}).items():
            git("checkout", "--quiet", "-b", other, branch, cwd=work)
            self._write(work, other_files)
            git("commit", "--quiet", "--allow-empty", "-m", f"{name} at {other}", cwd=work)
            git("push", "--quiet", "origin", other, cwd=work)
        return self.url(name)

    @staticmethod
    def _write(work: Path, files: Mapping[str, str]) -> None:
        for relative, text in files.items():
            target = work / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        git("add", "-A", cwd=work)

    def branches(self, name: str) -> dict[str, str]:
        """What the repository's branches point at now (what was pushed), by branch name."""
        out = git(
            "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads", cwd=self.path(name)
        )
        return dict(line.split(" ", 1) for line in out.splitlines() if line)

    def log(self, name: str, ref: str) -> list[tuple[str, str]]:
        """The commits reachable from ``ref``, newest first, as (sha, subject)."""
        out = git("log", "--format=%H %s", ref, cwd=self.path(name))
        return [(line[:40], line[41:]) for line in out.splitlines()]

    def show(self, name: str, ref: str, path: str) -> str:
        """A file's text at ``ref``."""
        return git("show", f"{ref}:{path}", cwd=self.path(name))

    # -- what happened ------------------------------------------------------------------------

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def auth_outcomes(self) -> list[str]:
        with self._lock:
            return [r.auth for r in self.requests]


def _credential(header: str | None, users: Mapping[str, str]) -> tuple[str | None, str]:
    """Who the Authorization header names, and whether its password matches ("ok"/"wrong"/"missing")."""
    if not header:
        return None, "missing"
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None, "wrong"
    try:
        username, _, password = base64.b64decode(encoded).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None, "wrong"
    if username in users and secrets.compare_digest(users[username], password):
        return username, "ok"
    return username, "wrong"


def _cgi_env(
    root: Path, method: str, path: str, query: str, headers: Message, user: str, length: int
) -> dict[str, str]:
    """The CGI environment ``git http-backend`` reads a request from."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_PROJECT_ROOT": str(root),
        "GIT_HTTP_EXPORT_ALL": "1",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "CONTENT_TYPE": headers.get("Content-Type", ""),
        "CONTENT_LENGTH": str(length),
        "REMOTE_USER": user,
        "GATEWAY_INTERFACE": "CGI/1.1",
        "SERVER_PROTOCOL": "HTTP/1.1",
    }
    if headers.get("Content-Encoding"):
        env["HTTP_CONTENT_ENCODING"] = headers["Content-Encoding"]
    if headers.get("Git-Protocol"):
        env["GIT_PROTOCOL"] = headers["Git-Protocol"]
    return env


def _cgi_response(out: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """A CGI program's output as the HTTP status, headers and body it means."""
    head, found, payload = out.partition(b"\r\n\r\n")
    if not found:
        head, _, payload = out.partition(b"\n\n")
    status, headers = 200, []
    for line in head.decode("latin-1").splitlines():
        key, _, value = line.partition(":")
        if key.lower() == "status":
            status = int(value.strip().split(" ", 1)[0])
        elif key:
            headers.append((key, value.strip()))
    return status, headers, payload


def _handler(server: GitServer) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):  # the requests are recorded in ``server.requests``
        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks: list[bytes] = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        self.rfile.readline()
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _serve(self) -> None:
            path, _, query = self.path.partition("?")
            username, auth = _credential(self.headers.get("Authorization"), server.users)
            pushing = "receive-pack" in self.path
            if auth == "missing" and (server.anonymous_write or (server.anonymous_read and not pushing)):
                auth = "anonymous"  # a public repository: reading needs no credential
            if auth not in ("ok", "anonymous"):
                server.record(Request(self.command, path, username, auth, 401))
                self._body()
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = self._body()
            env = _cgi_env(server.root, self.command, path, query, self.headers, username or "", len(body))
            env["REMOTE_ADDR"] = self.client_address[0]
            done = subprocess.run([HTTP_BACKEND], input=body, env=env, capture_output=True)
            status, headers, payload = _cgi_response(done.stdout) if done.stdout else (500, [], b"")
            server.record(Request(self.command, path, username, auth, status))
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


@contextmanager
def serve_git(root: Path) -> Iterator[GitServer]:
    """A git server on a free loopback port serving the bare repositories under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    server = GitServer(root=root)
    with serve_loopback(_handler(server), "git-server", join_s=5) as url:
        server.base_url = url
        yield server
