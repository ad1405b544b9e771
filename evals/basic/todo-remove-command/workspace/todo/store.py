"""The items, kept in a JSON file: {"items": [{"id": 1, "text": "...", "done": false}, ...]}."""

import json
import os


def path():
    return os.environ.get("TODO_FILE", "todo.json")


def load():
    try:
        with open(path(), encoding="utf-8") as file:
            return json.load(file)
    except FileNotFoundError:
        return {"items": []}


def save(data):
    with open(path(), "w", encoding="utf-8") as file:
        json.dump(data, file, indent=2)


def add(text):
    data = load()
    item = {"id": len(data["items"]) + 1, "text": text, "done": False}
    data["items"].append(item)
    save(data)
    return item


def find(data, item_id):
    for item in data["items"]:
        if item["id"] == item_id:
            return item
    return None
