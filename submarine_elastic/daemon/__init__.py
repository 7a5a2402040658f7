"""The controller's process: the wiring above :mod:`submarine_elastic.controller` and
:mod:`submarine_elastic.bridge`, and its supervision.

``serve`` builds the process (metrics service, policy engine, YARN backend, controller, its gRPC API
and, when asked, the py4j bridge) and runs it until SIGTERM; ``python -m submarine_elastic.daemon`` runs
it. ``process`` starts it in the background and stops it (``submarine controller start|stop``). The
controller imports neither this package nor the bridge; the bridge reaches the controller only through
its API.
"""
