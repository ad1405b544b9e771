"""Where notifications land in tests, all on loopback: an HTTP receiver (a webhook endpoint, or
Slack's incoming webhook: both take a JSON POST) that records every request and can be told to
fail, and an SMTP server (aiosmtpd) that checks the login and keeps every message."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.support.loopback import QuietHandler, free_port, serve_loopback


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HookReceiver:
    """Records every POST; answers each with the next of ``answers`` (then 200)."""

    received: list[Received] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, *statuses: int) -> None:
        with self.lock:
            self.answers.extend(statuses)

    def take(self, path: str, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            self.received.append(Received(path, headers, body))
            return self.answers.pop(0) if self.answers else 200

    def ids(self) -> list[str]:
        with self.lock:
            return [r.headers.get("webhook-id", "") for r in self.received]


@contextmanager
def serve_receiver() -> Iterator[tuple[HookReceiver, str]]:
    """A receiver on a free loopback port, and its base URL."""
    receiver = HookReceiver()

    class Handler(QuietHandler):
        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            status = receiver.take(self.path, headers, body)
            self.send_response(status)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    with serve_loopback(Handler, "notify-receiver") as url:
        yield receiver, url


@dataclass
class MailBox:
    """What the SMTP server was sent, after a login with ``username`` and ``password``."""

    username: str
    password: str
    messages: list[EmailMessage] = field(default_factory=list)
    envelopes: list[tuple[str, list[str]]] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)

    def __call__(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        """The authenticator: only the right password logs in."""
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == self.username
            and auth_data.password.decode() == self.password
        )
        self.logins.append(f"{mechanism}:{'ok' if ok else 'refused'}")
        return AuthResult(success=ok, handled=False)  # handled=False: aiosmtpd answers a refusal itself

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        message = message_from_bytes(envelope.content, policy=policy.default)
        assert isinstance(message, EmailMessage)
        self.messages.append(message)
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        return "250 OK"


@contextmanager
def serve_smtp(username: str, password: str) -> Iterator[tuple[MailBox, int]]:
    """An SMTP server on a free loopback port that offers a login (over plain text: loopback)."""
    port = free_port()
    box = MailBox(username, password)
    controller = Controller(
        box,
        hostname="127.0.0.1",
        port=port,
        authenticator=box,
        # AUTH offered over plain text (loopback); not required, so aiosmtpd does not warn: the
        # mailbox's record of logins says whether the sender logged in.
        auth_require_tls=False,
    )
    controller.start()
    try:
        yield box, port
    finally:
        controller.stop()
