"""How many tokens a request will take, estimated before it is sent.

The estimate sizes a call's worst-case reservation (DESIGN.md rule 1) and its rate-limit
admission, for the api harness's calls and the gateway's alike; the provider's own count comes
back in the response's usage and settles both.
"""

from __future__ import annotations

import json
from typing import Any

CHARS_PER_TOKEN = 4


def estimate_tokens(value: Any) -> int:
    """A rough count (4 characters a token of its JSON) — enough to reserve for and to cut by."""
    return len(json.dumps(value)) // CHARS_PER_TOKEN
