"""User-facing errors. The CLI prints them on one line and exits with code 2."""


class UsageError(ValueError):
    """Bad input from the user: an unknown name, an unreadable file, a nonsensical number."""


def unknown(kind: str, name: str, valid) -> UsageError:
    """An error naming the unknown value and the valid choices."""
    return UsageError(f"unknown {kind} '{name}'; valid: {', '.join(sorted(valid))}")
