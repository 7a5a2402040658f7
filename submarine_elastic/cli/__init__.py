"""The ``submarine`` command line (click + rich)."""
