"""What runs next: the coordinator's state machine.

A project is created and started (``submission``, its PROMPT.md checked by ``prompt``), its
workflow expands it into tasks and agents (``workflows``), iterations pass the breaker and the
budget gate and are admitted fairly (``admission``), are sent to workers after their
transaction commits (``outbox``, ``dispatch``), and when one reports back the project advances
(``advance``): the next iteration, a task moving on, or the end (``transitions``). Pausing,
resuming and stopping are ``lifecycle``; the circuit breaker is ``breaker``; ``reconcile``
re-sends the work of dead workers and ``worker_watch`` says when no worker is left to take it;
``workspace`` holds the bare git repositories the coordinator owns; ``lookup`` finds the rows
all of them act on.

May import ``shared`` and ``orchestrator.remotes``, the layer below it (``source`` clones a
project's repository). Never ``workers``, and nothing above it in ``orchestrator`` (queries,
transcripts, delivery, the edges).
"""
