"""A package index on loopback for environment tests: a directory served as a PEP 503 simple
index (``/simple/<name>/``) by a thread of the test, with Debian's pip wheel (the sandbox image
has no pip) and a small wheel made here, ``raas-demo-dep``, whose import says its version."""

from __future__ import annotations

import base64
import hashlib
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PIP_WHEEL = next(Path("/usr/share/python-wheels").glob("pip-*-py3-none-any.whl"), None)
DEP = "raas-demo-dep"


def make_wheel(directory: Path, version: str) -> Path:
    """``raas_demo_dep-VERSION-py3-none-any.whl``: one module whose VERSION is ``version``."""
    dist = f"raas_demo_dep-{version}"
    files = {
        "raas_demo_dep/__init__.py": f'VERSION = "{version}"\n',
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {DEP}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: raas-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{dist}.dist-info/RECORD"] = "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n"
    path = directory / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


def _publish(root: Path, project: str, wheel: Path) -> None:
    folder = root / "simple" / project
    folder.mkdir(parents=True, exist_ok=True)
    (folder / wheel.name).write_bytes(wheel.read_bytes())
    links = "".join(f'<a href="{p.name}">{p.name}</a>\n' for p in sorted(folder.glob("*.whl")))
    (folder / "index.html").write_text(f"<html><body>\n{links}</body></html>\n", encoding="utf-8")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass


@contextmanager
def package_index(root: Path, versions: tuple[str, ...] = ("1.0", "2.0")) -> Iterator[str]:
    """Serve pip and ``raas-demo-dep`` (each of ``versions``) on 127.0.0.1; yields the base URL."""
    assert PIP_WHEEL is not None, "Debian's python3-pip-whl (/usr/share/python-wheels) is needed"
    _publish(root, "pip", PIP_WHEEL)
    for version in versions:
        _publish(root, DEP, make_wheel(root, version))
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
