"""Work that arrives by itself (issue #24): triggers from forge webhooks, generic webhooks and
schedules, each accepted delivery one run.

- ``signatures``: is a delivery from whom it says (HMAC over the raw bytes, constant time).
- ``sources``: what a verified GitHub, GitLab or generic delivery asks for (filters, allow-lists).
- ``intake``: the receiver: one row per delivery, unique on its id; answers fast.
- ``launch``: a committed run reaches its start after the commit (the coordinator queue).
- ``start``: claim, decide (``limits``), make the project from the template, link, comment.
- ``schedule`` + ``clock``: one run per due slot, claimed in the database; lost launches resent.
- ``store``: a tenant's triggers (add, ls, show, pause, resume, rm) and their runs.

A layer between ``mcp`` and ``queries | transcripts | delivery``: it may import ``delivery``
(issue comments, forges), ``scheduling`` (submission, lifecycle, the feedback loop), ``remotes``
(the operator's key) and ``shared``; ``api``, ``service`` and ``cli`` import it.
"""
