"""Where every process reads its environment: :func:`settings`, the one typed model of every variable.

The model and the table of what each variable means are in :mod:`submarine_elastic.settings` (pydantic); this
module is the standard library only and loads the model on first use, so the training side (``tf_hooks``) and
the CLI may import it without pulling in the controller, and ``submarine job show`` without pydantic. The
submit side writes a job's containers' variables from the same model (``settings.container_env``); the user
sets the cluster-side ones in their shell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from submarine_elastic.secret_files import SecretFileError, read_secret

if TYPE_CHECKING:
    from submarine_elastic.settings import Settings

__all__ = ["SecretFileError", "read_secret", "settings"]


def settings() -> Settings:
    """This process's settings, read from its environment (again only when a variable of the model changed). A
    variable its rule refuses raises ``settings.SettingsError`` (a ``ValueError`` naming it and the value) where
    its field is read."""
    from submarine_elastic.settings import load

    return load()
