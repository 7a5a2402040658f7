"""The in-container job runtime: the job driver (:mod:`~submarine_elastic.elastic.driver`, the container's
process; :mod:`~submarine_elastic.elastic.jobdriver` and its parts), the worker agent
(:mod:`~submarine_elastic.elastic.agent`), the one adapter to Horovod's elastic internals
(:mod:`~submarine_elastic.elastic.horovod_adapter`) and the client of a running job's driver.

What these processes say to each other and to the submit side is in :mod:`submarine_elastic.protocol`.
"""
