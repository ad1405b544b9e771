"""What each command does; each returns the exit status."""

import sys

from todo import store


def cmd_add(args):
    item = store.add(" ".join(args.text))
    print(f"added {item['id']}")
    return 0


def cmd_list(args):
    for item in store.load()["items"]:
        mark = "x" if item["done"] else " "
        print(f"[{mark}] {item['id']}: {item['text']}")
    return 0


def cmd_done(args):
    data = store.load()
    item = store.find(data, args.id)
    if item is None:
        print(f"todo: no item {args.id}", file=sys.stderr)
        return 1
    item["done"] = True
    store.save(data)
    return 0
