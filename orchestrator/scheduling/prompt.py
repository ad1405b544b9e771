"""PROMPT.md's rules, the same on submission (``raas submit``, ``raas run``) and when a running
project is given a new one (``raas prompt``): plain text, not empty, at most 256 KiB.
"""

from __future__ import annotations

from pathlib import Path

from shared.errors import InvalidInput

PROMPT_FILE = "PROMPT.md"
MAX_PROMPT_BYTES = 256 * 1024


def check_prompt(prompt: str, what: str = PROMPT_FILE) -> None:
    """Refuse a prompt the agent cannot be given.

    Args:
        what: how the message names it (``"the new PROMPT.md"`` when one is replaced).

    Raises:
        InvalidInput: it is larger than ``MAX_PROMPT_BYTES``, holds a NUL byte (the database's
            text columns cannot), or is empty.
    """
    if len(prompt.encode("utf-8", errors="surrogatepass")) > MAX_PROMPT_BYTES:
        msg = f"{what} is larger than {MAX_PROMPT_BYTES // 1024} KiB; shorten it"
        raise InvalidInput(msg)
    if "\x00" in prompt:
        msg = f"{what} contains a NUL byte; it must be plain text"
        raise InvalidInput(msg)
    if not prompt.strip():
        msg = f"{what} is empty; write the agent's instructions there"
        raise InvalidInput(msg)


def read_prompt(root: Path) -> str:
    """The PROMPT.md at the top of a project directory, checked by ``check_prompt``.

    Raises:
        InvalidInput: there is none, or ``check_prompt`` refuses it.
    """
    path = root / PROMPT_FILE
    if not path.is_file():
        msg = f"project has no {PROMPT_FILE} at its top level; write the agent's instructions there"
        raise InvalidInput(msg)
    with path.open("rb") as file:
        # One byte past the limit is enough to refuse it (what does not decode is replaced by
        # U+FFFD, never shorter): a huge file is not read whole.
        prompt = file.read(MAX_PROMPT_BYTES + 1).decode("utf-8", errors="replace")
    check_prompt(prompt)
    return prompt
