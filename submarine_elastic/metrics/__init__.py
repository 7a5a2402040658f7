"""The metrics service: what training processes report, kept per job for the scheduler side.

``api`` holds the interfaces and value types, ``store`` the in-memory store, ``server`` the gRPC
service and ``prometheus`` its Prometheus exposition. This ``__init__`` imports nothing, so the
training side can load the generated stubs under ``proto/`` without pulling in the server.
"""
