"""The trained model exported as a TensorFlow SavedModel when the job ends (``job run --saved_model_path``).

Rank 0 exports, after the last commit (:class:`~tf_hooks.elastic.keras.ElasticKerasTrainer.fit`'s end, or an
elastic script's, as ``examples/train_elastic.py`` does). Keras 3 writes it with ``model.export`` (an
inference SavedModel: its ``serve`` endpoint and the model's variables), Keras 2 (``tf_keras``) with
``model.save(..., save_format="tf")``, which ``tf_keras.models.load_model`` reads back whole; both load with
``tf.saved_model.load``. The model goes to a sibling directory first and is moved into place whole, so a
reader never sees half of one; an earlier export at the path is replaced.

A path that cannot be written fails loudly, at :func:`export_path` (before training, where the helpers
call it) and at :func:`export`: a :class:`SavedModelError` naming the path and why.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from tf_hooks.api import TfHooksError


class SavedModelError(TfHooksError):
    """The model cannot be exported where the job asked; the message names the path and why."""


def export_path(given: str | os.PathLike[str] | bool | None = None) -> Path | None:
    """Where the job's model goes: ``given``, else ``SUBMARINE_SAVED_MODEL_PATH``; None for none (or ``given``
    False). Its parent is created, and must be writable.

    Raises:
        SavedModelError: the path is not a local one, is a file, or its directory cannot be written.
    """
    if given is False:
        return None
    if given is None or given is True:
        from submarine_elastic import env

        given = env.settings().saved_model_path
        if given is None:
            return None
    text = os.fspath(given).strip().removeprefix("file://")
    if not text:
        return None
    if "://" in text:
        raise SavedModelError(f"--saved_model_path {text!r}: only a local directory is written, not a URL")
    path = Path(text).absolute()
    if path.exists() and not path.is_dir():
        raise SavedModelError(f"--saved_model_path {path}: it is a file, not a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SavedModelError(
            f"--saved_model_path {path}: cannot create {path.parent}: {exc.strerror or exc}"
        ) from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise SavedModelError(f"--saved_model_path {path}: {path.parent} is not writable")
    return path


def export(model: Any, path: Path) -> Path:
    """Exports ``model`` (Keras 3 or Keras 2) to ``path`` as a SavedModel, replacing what was there.

    Blocks while TensorFlow writes it (seconds for a small model).

    Raises:
        SavedModelError: it cannot be written (naming the path and TensorFlow's reason).
    """
    staging = path.with_name(f".{path.name}.exporting-{os.getpid()}")
    try:
        shutil.rmtree(staging, ignore_errors=True)
        if _keras_2(model):
            model.save(str(staging), save_format="tf")
        else:
            model.export(str(staging), format="tf_saved_model", verbose=False)
        if path.exists():
            shutil.rmtree(path)
        staging.rename(path)
    except Exception as exc:  # TensorFlow raises its own errors and OSError alike
        shutil.rmtree(staging, ignore_errors=True)
        raise SavedModelError(f"--saved_model_path {path}: the model cannot be exported: {exc}") from exc
    return path


def _keras_2(model: Any) -> bool:
    """Whether ``model`` is a Keras 2 (``tf_keras``) model, whichever name the script imported it by."""
    return any(cls.__module__.split(".")[0] == "tf_keras" for cls in type(model).__mro__)
