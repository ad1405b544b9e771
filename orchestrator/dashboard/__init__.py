"""The web dashboard: server-rendered pages (Jinja2 + htmx) and their live event stream, an edge
over the same queries and lifecycle rules as the API, mounted on the coordinator at ``/`` and on
``raas run --ui``.

- ``app``: :func:`mount_dashboard` (routes, static files, security headers, error pages);
- ``sessions``: sign-in with an API token → a session held on the server (it ends on sign-out
  or when idle) and its cookie, and CSRF tokens;
- ``pages`` (pages and htmx fragments), ``actions`` (pause, resume, stop, budget, prompt),
  ``triggers`` and ``notifications`` (their pages, pause and resume), ``stream`` (server-sent
  events), ``downloads`` (workspace, transcript, diffs), ``rounds`` (a project's PR rounds),
  ``render`` (Jinja2), ``assets`` (versioned static files).

An edge below ``service`` (which mounts it), ``embedded`` and ``cli``: it may import ``api`` and
every layer below it, and ``shared``; never ``workers``.
"""

from orchestrator.dashboard.app import DashboardOptions, close_streams, mount_dashboard

__all__ = ["DashboardOptions", "close_streams", "mount_dashboard"]
