"""A one-line CSV parser (no csv module on the embedded target)."""


def parse_line(line: str) -> list[str]:
    """The fields of one CSV line."""
    return line.split(",")
