"""The CLI's HTTP client for the coordinator: errors come back as the same error tree."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from shared import errors
from shared.schemas import EventOut

_ERRORS: dict[int, type[errors.RaasError]] = {
    401: errors.Unauthorized,
    404: errors.NotFound,
    409: errors.Conflict,
    502: errors.ServiceUnavailable,
    503: errors.ServiceUnavailable,
    504: errors.ServiceUnavailable,
    413: errors.InvalidInput,
    422: errors.InvalidInput,
    400: errors.InvalidInput,
}


class ApiClient:
    """The coordinator's HTTP API as the CLI calls it: JSON bodies, errors raised as the
    ``shared.errors`` tree (``workers.workspace_transfer`` is the worker's own, for git bundles)."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url
        self._http = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s
        )

    def _raise_for(self, response: httpx.Response) -> None:
        if response.is_success:
            return
        try:
            detail = response.json().get("detail", response.text)
        except (json.JSONDecodeError, AttributeError):
            detail = response.text
        raise _ERRORS.get(response.status_code, errors.RaasError)(str(detail))

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            msg = (
                f"the coordinator at {self.base_url} does not answer ({type(exc).__name__}); "
                "start it with `raas coordinator` or set RAAS_COORDINATOR_URL"
            )
            raise errors.ServiceUnavailable(msg) from exc
        self._raise_for(response)
        return response.json() if response.content else None

    def create_project(
        self, archive: bytes, name: str, *, repo: str | None = None, ref: str | None = None
    ) -> dict[str, Any]:
        params = {"name": name} | ({"repo": repo} if repo else {}) | ({"ref": ref} if ref else {})
        result: dict[str, Any] = self.request(
            "POST",
            "/v1/projects",
            params=params,
            content=archive,
            headers={"Content-Type": "application/gzip"},
        )
        return result

    def start_project(self, project_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", f"/v1/projects/{project_id}/start")
        return result

    def action(self, project_id: str, verb: str) -> dict[str, Any]:
        """POST /v1/projects/ID/VERB (pause, resume, stop)."""
        result: dict[str, Any] = self.request("POST", f"/v1/projects/{project_id}/{verb}")
        return result

    def approve(self, project_id: str, reject: bool, comment: str | None) -> dict[str, Any]:
        """POST /v1/projects/ID/approve: decide what the project waits for."""
        body = {"reject": reject, "comment": comment}
        result: dict[str, Any] = self.request("POST", f"/v1/projects/{project_id}/approve", json=body)
        return result

    def set_prompt(self, project_id: str, prompt: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "PUT",
            f"/v1/projects/{project_id}/prompt",
            content=prompt.encode(),
            headers={"Content-Type": "text/markdown"},
        )
        return result

    def set_budget(self, project_id: str, limit_usd: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "PUT", f"/v1/projects/{project_id}/budget", json={"limit_usd": limit_usd}
        )
        return result

    def cost(self, project_id: str, iterations: bool) -> dict[str, Any]:
        params = {"iterations": str(iterations).lower()}
        result: dict[str, Any] = self.request("GET", f"/v1/projects/{project_id}/cost", params=params)
        return result

    def graph(self, project_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/v1/projects/{project_id}/graph")
        return result

    def projects(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/v1/projects")
        return result

    def diff(self, project_id: str, iteration: int | None) -> str:
        params = {"iteration": iteration} if iteration is not None else {}
        try:
            response = self._http.get(f"/v1/projects/{project_id}/diff", params=params)
        except httpx.TransportError as exc:
            msg = f"the coordinator at {self.base_url} does not answer ({type(exc).__name__})"
            raise errors.ServiceUnavailable(msg) from exc
        self._raise_for(response)
        return response.text

    def project(self, project_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/v1/projects/{project_id}")
        return result

    def events(
        self, project_id: str, after: int = 0, follow: bool = True, idle_timeout_s: float | None = None
    ) -> Iterator[EventOut]:
        """Events from ``after`` on; with ``follow`` the stream lasts until the project ends, or
        (with ``idle_timeout_s``) until nothing has come for that long."""
        params: dict[str, str | int] = {"after": after, "follow": str(follow).lower()}
        try:
            with self._http.stream(
                "GET",
                f"/v1/projects/{project_id}/events",
                params=params,
                timeout=httpx.Timeout(30.0, read=idle_timeout_s),
            ) as response:
                if not response.is_success:
                    response.read()
                    self._raise_for(response)
                for line in response.iter_lines():
                    if line.strip():
                        yield EventOut.model_validate_json(line)
        except httpx.TransportError as exc:
            if isinstance(exc, httpx.ReadTimeout) and idle_timeout_s is not None:
                return  # nothing new for idle_timeout_s: where the caller asked to stop
            msg = f"lost the coordinator at {self.base_url} while following ({type(exc).__name__})"
            raise errors.ServiceUnavailable(msg) from exc

    def memory(
        self, project_id: str, search: str | None = None, tags: Sequence[str] = (), limit: int | None = None
    ) -> list[dict[str, Any]]:
        """The project's memory bank (MemoryEntryOut as JSON): every key, or a search's matches."""
        params: dict[str, Any] = {"tag": list(tags)}
        if search is not None:
            params["search"] = search
        if limit is not None:
            params["limit"] = limit
        result: list[dict[str, Any]] = self.request("GET", f"/v1/projects/{project_id}/memory", params=params)
        return result

    def transcript(self, project_id: str, agent: str | None = None) -> dict[str, Any]:
        """The project's transcript as JSON; with ``agent``, that agent's conversation."""
        params = {"agent": agent} if agent else {}
        result: dict[str, Any] = self.request("GET", f"/v1/projects/{project_id}/transcript", params=params)
        return result

    def download_workspace(self, project_id: str, dest: Path) -> None:
        """Stream the project's final workspace (a tar of ``main``) into the file ``dest``."""
        try:
            with self._http.stream(
                "GET", f"/v1/projects/{project_id}/workspace.tar", timeout=httpx.Timeout(30.0, read=300.0)
            ) as response:
                if not response.is_success:
                    response.read()
                    self._raise_for(response)
                with dest.open("wb") as handle:
                    for chunk in response.iter_bytes():
                        handle.write(chunk)
        except httpx.TransportError as exc:
            msg = f"lost the coordinator at {self.base_url} while downloading ({type(exc).__name__})"
            raise errors.ServiceUnavailable(msg) from exc

    def workers(self, timeout_s: float = 1.0) -> list[dict[str, Any]]:
        """Live Celery nodes, their queues and current tasks (waits ``timeout_s`` for replies)."""
        result: list[dict[str, Any]] = self.request(
            "GET", "/v1/workers", params={"timeout_s": timeout_s}, timeout=timeout_s * 3 + 30
        )
        return result

    def close(self) -> None:
        self._http.close()

    def set_credential(self, host: str, body: dict[str, str]) -> None:
        self.request("PUT", f"/v1/credentials/{host}", json=body)

    def credentials(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/v1/credentials")
        return result

    def delete_credential(self, host: str) -> None:
        self.request("DELETE", f"/v1/credentials/{host}")
