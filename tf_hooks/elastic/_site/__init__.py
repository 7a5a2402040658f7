"""The directory the worker agent puts first on ``PYTHONPATH``: its ``sitecustomize`` runs at start-up.

A package only so that it ships with ``tf_hooks``; nothing imports it as one.
"""
