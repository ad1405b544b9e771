"""News out (issue #24): subscriptions of events to a medium, and the sender of the outbox.

``subscriptions`` (add, list, pause, resume, remove; the bad input refused in one line, the
secret sealed with the operator's key), ``news`` (what one notification says, gathered once),
``escape`` (agent text made inert for Slack's mrkdwn and for HTML mail), ``media/`` (one module
per medium: the signed webhook, Slack, mail over SMTP, behind one interface) and ``sender`` (the
loop that claims due rows, sends them and retries with backoff; a dead endpoint is paused).
The rows themselves are written by ``shared.notifications``, in the transaction of each event.

Beside ``queries``, ``transcripts`` and ``delivery``: it may import ``scheduling`` (the
workspace's diff), ``remotes`` (the operator's key) and ``shared``; never the edges above it.
"""
