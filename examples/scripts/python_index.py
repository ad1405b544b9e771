"""A package index on loopback for examples/python-repo: a directory served as a PEP 503 simple
index, holding Debian's pip wheel (the sandbox image has no pip) and a wheel of
examples/packages/tinyslug built here (stdlib only, no network).

    python3 examples/scripts/python_index.py [--port 38765]   # serves until Ctrl-C
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import tempfile
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "packages" / "tinyslug"
PIP_WHEELS = Path("/usr/share/python-wheels")


def build_wheel(out: Path, name: str, version: str, source: Path) -> Path:
    """A pure-Python wheel of the package directory ``source`` (its files under ``name/``)."""
    dist = f"{name}-{version}"
    files = {f"{name}/{p.name}": p.read_bytes() for p in sorted(source.glob("*.py"))}
    files[f"{dist}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    )
    wheel_info = "Wheel-Version: 1.0\nGenerator: raas-example\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{dist}.dist-info/WHEEL"] = wheel_info.encode()
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    files[f"{dist}.dist-info/RECORD"] = ("\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n").encode()
    wheel = out / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


def publish(root: Path, project: str, wheel: Path) -> None:
    folder = root / "simple" / project
    folder.mkdir(parents=True, exist_ok=True)
    (folder / wheel.name).write_bytes(wheel.read_bytes())
    (folder / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n', encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=38765)
    port = parser.parse_args().port
    pip = next(PIP_WHEELS.glob("pip-*-py3-none-any.whl"), None)
    if pip is None:
        msg = f"no pip wheel in {PIP_WHEELS}: apt-get install python3-pip-whl"
        raise SystemExit(msg)
    root = Path(tempfile.mkdtemp(prefix="raas-example-index-"))
    publish(root, "pip", pip)
    publish(root, "tinyslug", build_wheel(root, "tinyslug", "1.0", PACKAGE / "tinyslug"))
    server = ThreadingHTTPServer(("127.0.0.1", port), partial(SimpleHTTPRequestHandler, directory=str(root)))
    print(f"index of pip and tinyslug on http://127.0.0.1:{port}/simple/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
