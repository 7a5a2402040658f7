"""Run by Python at start-up in every training process a submarine-elastic worker agent starts (the
agent puts this directory first on ``PYTHONPATH``): installs :mod:`tf_hooks.elastic.autojoin`, so the
script's own ``hvd.init()`` joins the job's ring, then runs any other ``sitecustomize`` on the path."""

import importlib
import os
import sys


def _install() -> None:
    try:
        from tf_hooks.elastic import autojoin
    except ImportError as exc:
        sys.stderr.write(
            f"submarine-elastic: cannot load tf_hooks ({exc}) in {sys.executable}; hvd.init() will not join the "
            f"job's ring and the job will fail when no worker joins. Run the command with the Python that has "
            f"submarine-elastic installed.\n"
        )
        return
    autojoin.install()


def _chain() -> None:
    """Imports the ``sitecustomize`` this one shadows, if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as exc:
        if exc.name != "sitecustomize":
            raise
    finally:
        sys.path[:] = saved
        if ours is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = ours


_install()
_chain()
