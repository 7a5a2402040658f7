"""What the processes of a job say to each other: the leaf that the in-container runtime
(:mod:`submarine_elastic.elastic`), the training side (:mod:`tf_hooks`), the submit side
(:mod:`submarine_elastic.submit`) and the controller import, and that imports none of them.

- :mod:`~submarine_elastic.protocol.api`: the errors, the three state machines (job, worker, agent) and their wire
  numbers, batch limits;
- :mod:`~submarine_elastic.protocol.proto`: ``elastic.proto`` and its generated stubs (agents and clients to the
  driver, agent to training process);
- :mod:`~submarine_elastic.protocol.channel`: the framed local socket between an agent and its training process;
- :mod:`~submarine_elastic.protocol.records`: the records a driver writes (its state for its successor, the job's
  outcome that ``submarine job show`` reads).
"""
