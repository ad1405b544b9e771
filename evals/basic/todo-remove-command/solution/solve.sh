#!/usr/bin/env bash
set -eu
python3 - <<'PY'
from pathlib import Path

store = Path("todo/store.py")
text = store.read_text()
text = text.replace(
    '''    item = {"id": len(data["items"]) + 1, "text": text, "done": False}
    data["items"].append(item)''',
    '''    # Ids are never reused: the next one is kept, not counted (items can be removed).
    next_id = data.get("next_id", max((i["id"] for i in data["items"]), default=0) + 1)
    item = {"id": next_id, "text": text, "done": False}
    data["items"].append(item)
    data["next_id"] = next_id + 1''',
)
text += '''

def remove(item_id):
    """Delete the item; False when there is none with that id."""
    data = load()
    item = find(data, item_id)
    if item is None:
        return False
    data.setdefault("next_id", max(i["id"] for i in data["items"]) + 1)
    data["items"].remove(item)
    save(data)
    return True
'''
store.write_text(text)

commands = Path("todo/commands.py")
text = commands.read_text()
text = text.replace(
    '''    for item in store.load()["items"]:
''',
    '''    for item in store.load()["items"]:
        if args.pending and item["done"]:
            continue
''',
)
text += '''

def cmd_remove(args):
    if not store.remove(args.id):
        print(f"todo: no item {args.id}", file=sys.stderr)
        return 1
    return 0
'''
commands.write_text(text)

main = Path("todo/__main__.py")
text = main.read_text()
text = text.replace(
    '''    sub.add_parser("list").set_defaults(run=commands.cmd_list)''',
    '''    listing = sub.add_parser("list")
    listing.add_argument("--pending", action="store_true")
    listing.set_defaults(run=commands.cmd_list)
    remove = sub.add_parser("remove")
    remove.add_argument("id", type=int)
    remove.set_defaults(run=commands.cmd_remove)''',
)
main.write_text(text)
PY
