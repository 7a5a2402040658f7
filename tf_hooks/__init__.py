"""Training-side helpers: metrics hooks and elastic-training helpers that run inside the training process.

Nothing here imports the controller side (``submarine_elastic``)."""
