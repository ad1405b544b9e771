"""The relay inside a ``registries`` container: its loopback port to the worker's egress proxy.

The container has no network but loopback; the proxy's unix socket comes in read-only at
:data:`PROXY_DIR`. The relay (python3, like the sandbox helper) listens on
``127.0.0.1:3128`` inside, daemonizes once bound (so the exec that starts it returns only when
the port answers) and pipes each connection to the socket. ``HTTP_PROXY`` and ``HTTPS_PROXY``
name it, so pip, npm, cargo, go and curl use it without being told.
"""

from __future__ import annotations

from typing import Any

PROXY_DIR = "/run/raas-proxy"
PROXY_PORT = 3128
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
PROXY_ENV = {
    "HTTP_PROXY": PROXY_URL,
    "HTTPS_PROXY": PROXY_URL,
    "http_proxy": PROXY_URL,
    "https_proxy": PROXY_URL,
}

RELAY = f"""
import os, socket, threading
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", {PROXY_PORT}))
srv.listen(128)
if os.fork():
    os._exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def serve(conn):
    up = socket.socket(socket.AF_UNIX)
    try:
        up.connect("{PROXY_DIR}/proxy.sock")
    except OSError:
        conn.close()
        return
    back = threading.Thread(target=pipe, args=(up, conn), daemon=True)
    back.start()
    pipe(conn, up)
    back.join()
    conn.close()
    up.close()
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


def start_relay(api: Any, container_id: str, user: str) -> None:
    """Start the relay in the running container; returns once its port is bound.

    Raises:
        OSError: it did not start (no python3 in the image, the port taken).
    """
    exec_id = api.exec_create(container_id, ["python3", "-c", RELAY], user=user)["Id"]
    output = api.exec_start(exec_id)
    code = api.exec_inspect(exec_id)["ExitCode"]
    if code != 0:
        text = output.decode(errors="replace").strip().splitlines()[-1:] if output else []
        msg = f"the registries relay did not start in the container (exit {code}): {' '.join(text)}"
        raise OSError(msg)
