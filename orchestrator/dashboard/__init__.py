"""The web dashboard: server-rendered pages (Jinja2 + htmx) and their live event stream, an edge
over the same queries and lifecycle rules as the API, mounted on the coordinator at ``/`` and on
``raas run --ui``."""
