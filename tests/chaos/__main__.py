"""``python -m tests.chaos``: run a chaos soak and print its table; exit 1 if a check failed.

    python -m tests.chaos --minutes 30 --projects 50 --seed 7
    python -m tests.chaos --seed 7 --docker restart     # restart the machine's dockerd: run it alone

Every option is in ``--help``; docs/faults.md ("The chaos soak") says what it breaks and checks.
"""

from __future__ import annotations

import argparse
import sys

from .soak import SoakConfig, run


def main(argv: list[str] | None = None) -> int:
    defaults = SoakConfig()
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=defaults.minutes, help="how long faults land")
    parser.add_argument("--projects", type=int, default=defaults.projects, help="projects submitted")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="draws the projects and faults")
    parser.add_argument(
        "--interval", type=float, default=defaults.interval_s, help="mean seconds between faults"
    )
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency, help="iterations per worker")
    parser.add_argument("--followers", type=int, default=defaults.followers, help="projects followed live")
    parser.add_argument(
        "--docker", choices=("private", "cut", "restart"), default=defaults.docker,
        help="private: a dockerd of the soak's own, restarted; cut: the workers' socket to the machine's "
        "engine is cut; restart: the machine's dockerd (run alone!)",
    )  # fmt: skip
    parser.add_argument(
        "--store", choices=("local", "s3"), default=defaults.store,
        help="s3: workspaces in an S3 API server (moto) that has outages; local: on the coordinators' disk",
    )  # fmt: skip
    parser.add_argument(
        "--replicas",
        type=int,
        choices=(1, 2),
        default=defaults.replicas,
        help="coordinators (2: behind HAProxy)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the soak's directory (logs, data)")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.projects < 1 or args.interval <= 0 or args.workers < 1:
        parser.error("--minutes and --interval must be positive, --projects and --workers at least 1")
    config = SoakConfig(
        minutes=args.minutes, projects=args.projects, seed=args.seed, interval_s=args.interval,
        workers=args.workers, concurrency=args.concurrency, followers=args.followers, docker=args.docker,
        store=args.store, replicas=args.replicas, keep=args.keep,
    )  # fmt: skip
    result = run(config, say=lambda line: print(line, flush=True))
    print(result.report(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
