"""The chaos soak (issue #29, point 4): many projects run on a real cluster of processes while a
seeded random scheduler breaks its pieces every few seconds; afterwards one table says whether
anything was lost, duplicated, charged twice or left behind.

    python -m tests.chaos --minutes 10 --projects 20 --seed 7     # or: bash scripts/chaos.sh ...
    pytest -m chaos tests/chaos                                   # the short version (3 min, seed 339)

The pieces: :mod:`tests.chaos.services` (the soak's own Postgres, Redis, Docker path, object store
and load balancer), :mod:`tests.chaos.workload` (the projects and their script),
:mod:`tests.chaos.schedule` (the faults, drawn from the seed), :mod:`tests.chaos.checks` (what must
hold afterwards) and :mod:`tests.chaos.soak` (the run). docs/faults.md describes it.
"""
