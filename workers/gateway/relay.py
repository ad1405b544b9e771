"""Loopback TCP to the gateway's unix socket, for harnesses that cannot use a socket (Codex,
OpenCode): run inside the container as ``python3 relay.py PORT SOCKET``; it listens on
127.0.0.1:PORT and copies each connection's bytes both ways, unchanged, until either side ends.

Standard library only (the sandbox image has python3 and nothing else of ours). It prints
``relay listening on 127.0.0.1:PORT`` once it accepts connections (PORT 0: the port chosen).
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading

CHUNK = 65536


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(CHUNK):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)  # pass the end on; the other direction may go on


def _serve(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        print("usage: relay.py PORT SOCKET_PATH", file=sys.stderr)
        return 2
    listener = socket.create_server(("127.0.0.1", int(argv[0])), reuse_port=False)
    print(f"relay listening on 127.0.0.1:{listener.getsockname()[1]}", flush=True)
    while True:
        client, _ = listener.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_serve, args=(client, argv[1]), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
