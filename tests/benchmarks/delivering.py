"""bench_load's delivering projects (issue #25): a share of the load submitted from a repository on
the tests' git server (real git over HTTP on loopback) with a ``[delivery]`` opening a pull request
on the fake forge and following it, polled by the coordinator's own poller every ``poll_s``.

Such a project answers as the others do ("working", one call an iteration), but its raas.toml
makes that text its completion marker, needed ``iterations`` times in a row: it runs exactly as
many iterations as the others, completes instead of failing, is delivered (a push, a pull
request) and then followed. The fake forge answers an unchanged pull request with 304s (ETags).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks import rig
from tests.benchmarks.table import Check
from tests.support.forge import FakeForge, serve_forge
from tests.support.git_server import GitServer, serve_git
from tests.support.stack import Stack

REPO = "alice/app"


@dataclass
class Remote:
    """The git server with ``alice/app`` and the fake forge, for one run."""

    server: GitServer
    forge: FakeForge
    url: str
    workdir: Path

    def store_credential(self, running: Stack) -> None:
        """``raas credentials set`` for the git server's host (the forge takes the same token)."""
        token_file = self.workdir / "token"
        token_file.write_text(self.server.password + "\n")
        host = self.server.base_url.removeprefix("http://")
        stored = running.cli(
            "credentials", "set", host, "--username", self.server.username, "--token-file", str(token_file)
        )
        if stored.returncode != 0:
            msg = f"raas credentials set failed: {stored.stderr.strip()}"
            raise RuntimeError(msg)

    def toml(self, iterations: int, poll_s: float) -> str:
        """A project completing at iteration ``iterations`` that delivers and follows its PR."""
        return (
            f'completion_marker = "working"\ncompletion_threshold = {iterations}\n'
            + rig.raas_toml(iterations)
            + f'[delivery]\npull_request = "ready"\nforge = "github"\napi_url = "{self.forge.url}"\n'
            + f"poll_s = {poll_s}\n"
        )

    def create_projects(self, running: Stack, count: int, toml: str, prefix: str) -> list[str]:
        """Create (not start) ``count`` projects from ``alice/app``'s main, a few requests at a time."""
        client = rig.api(running)
        archive = rig.project_archive(toml)

        def create(i: int) -> str:
            project: str = client.create_project(archive, f"{prefix}-{i}", repo=self.url, ref="main")["id"]
            return project

        with ThreadPoolExecutor(4) as pool:
            return list(pool.map(create, range(count)))

    def forge_counts(self) -> Counter[str]:
        """The forge's answers so far: ``GET 200``, ``GET 304``, ``POST 201``..."""
        return Counter(f"{c.method} {c.status}" for c in self.forge.requests())

    def checks(self, svc: rig.Services, follow_ids: list[str]) -> list[Check]:
        """Every delivering project opened one pull request, follows it, and was polled with 304s."""
        if not follow_ids:
            return []
        with svc.pg() as conn:
            follows = dict(
                conn.execute(
                    "SELECT project_id, status FROM pr_follows WHERE project_id = ANY(%s)", (follow_ids,)
                ).fetchall()
            )
        watching = sum(1 for status in follows.values() if status == "watching")
        pulls = self.forge.pulls(REPO)
        counts = self.forge_counts()
        return [
            Check(
                "every delivering project opened one PR and follows it",
                len(pulls) == len(follow_ids) and watching == len(follow_ids),
                f"{len(pulls)} PRs of {len(follow_ids)}; {watching} follows watching",
            ),
            Check(
                "the followed PRs were polled, unchanged ones answered 304",
                counts["GET 304"] > 0,
                f"forge GETs: {counts['GET 200']} x 200, {counts['GET 304']} x 304",
            ),
        ]


@contextmanager
def remote(workdir: Path) -> Iterator[Remote]:
    """The git server (``alice/app`` with a README on main) and the fake forge, both on loopback."""
    with serve_git(workdir / "served") as server, serve_forge(token=server.password) as forge:
        url = server.create_repo(REPO, {"README.md": "hello\n"})
        yield Remote(server, forge, url, workdir)


def interleave(following: list[str], others: list[str]) -> list[str]:
    """Both lists as one, ``following`` spread evenly among ``others`` (the order they start in)."""
    if not following:
        return list(others)
    step = (len(following) + len(others)) / len(following)
    keyed = [(i * step, 0, p) for i, p in enumerate(following)] + [
        (i * (len(following) + len(others)) / max(1, len(others)), 1, p) for i, p in enumerate(others)
    ]
    return [p for _, _, p in sorted(keyed)]
