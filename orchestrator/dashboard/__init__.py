"""The web dashboard: server-rendered pages (Jinja2 + htmx) and their live event stream, an edge
over the same queries and lifecycle rules as the API, mounted on the coordinator at ``/`` and on
``raas run --ui``.

- ``app``: :func:`mount_dashboard` (routes, static files, security headers, error pages);
- ``sessions``: sign-in with an API token → a signed cookie, and CSRF tokens;
- ``pages`` (pages and htmx fragments), ``actions`` (pause, resume, stop, budget, prompt),
  ``stream`` (server-sent events), ``render`` (Jinja2), ``assets`` (versioned static files).
"""

from orchestrator.dashboard.app import DashboardOptions, mount_dashboard

__all__ = ["DashboardOptions", "mount_dashboard"]
