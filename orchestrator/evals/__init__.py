"""Evaluation as a workload (issue #27): suites × configurations × attempts, each attempt an
ordinary project, scored by a hidden test a worker runs on its final workspace.

- ``suite``: a suite directory (task.toml, instruction.md, workspace/, tests/test.sh, solution/),
  checked whole before anything starts.
- ``configs``: raas.toml fragments, and the raas.toml an attempt's project is made with.
- ``store``: a run and all its attempts written from an upload; listed and read per tenant.
- ``driver``: the coordinator's loop that starts attempts (concurrency, eval-wide budget), sends
  the hidden test when a project ends and resumes after any restart.
- ``stats`` + ``report``: resolve rate with a bootstrap interval, pass@k, pass^k, $ per resolved
  task, infra failures apart; a paired comparison (McNemar, paired bootstrap).

A layer beside ``triggers``: it may import ``scheduling`` (submission, lifecycle) and ``shared``;
``api``, ``dashboard``, ``service`` and ``cli`` import it. It never imports ``workers``: the
container work is the worker's ``raas.eval_verify``, sent by name.
"""
