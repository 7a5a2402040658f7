"""The one rule for a file that holds a secret (a token, a key): read whole, blanks around it stripped, never empty.

The standard library only: the environment's facade (``env``), the settings model and the CLI share it.
"""

from __future__ import annotations

from pathlib import Path


class SecretFileError(ValueError):
    """A file that should hold a secret cannot be read or holds none; the message names the file."""


def read_secret(path: Path, what: str) -> str:
    """The secret in ``path`` (a token: its first line, surrounding blanks stripped).

    Raises:
        SecretFileError: the file cannot be read or is empty (``what`` names whose secret it is).
    """
    try:
        value = path.expanduser().read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretFileError(f"cannot read {what} from {path}: {exc}") from None
    if not value:
        raise SecretFileError(f"{what} file {path} is empty")
    return value
