import argparse
import sys

from todo import commands


def main(argv=None):
    parser = argparse.ArgumentParser(prog="todo")
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add")
    add.add_argument("text", nargs="+")
    add.set_defaults(run=commands.cmd_add)
    sub.add_parser("list").set_defaults(run=commands.cmd_list)
    done = sub.add_parser("done")
    done.add_argument("id", type=int)
    done.set_defaults(run=commands.cmd_done)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
