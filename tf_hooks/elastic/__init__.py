"""Elastic-training helpers that run inside the training process.

- :mod:`tf_hooks.elastic.data`: exactly-once data within an epoch across resizes (a deterministic
  per-epoch permutation, sharded by rank from a committed global cursor). Pure numpy.
- :mod:`tf_hooks.elastic.rules`: batch size and learning rate on every resize (fixed global or fixed
  local batch, linear or square-root learning-rate scaling, the momentum-compensation ramp). Pure.
- :mod:`tf_hooks.elastic.ring`: joining the Horovod ring when started by a submarine-elastic worker
  agent: imports, model and data are built *before* the ring forms, so a joiner costs the running
  workers only the re-form.
- :mod:`tf_hooks.elastic.state`: Horovod elastic state holding TensorFlow variables (Keras 3 or 2, or a
  custom ``tf.GradientTape`` loop), committed every K steps, restored and broadcast on every reset.
- :mod:`tf_hooks.elastic.checkpoint`: the committed state written to disk every K commits in the
  background (``SUBMARINE_CHECKPOINT_PATH``), and read back when a whole job was lost. Pure numpy.
- :mod:`tf_hooks.elastic.optimizer`: a Keras optimizer (Keras 3 or 2) whose every update first averages
  the gradients over the ring, where Horovod's Keras ``DistributedOptimizer`` silently does not (Keras 3).
- :mod:`tf_hooks.elastic.keras`: Keras ``fit`` under Horovod elastic, Keras 3 or Keras 2 (``tf_keras``),
  with the two modules above and its own callbacks; and the guard that refuses Horovod's own Keras
  helpers under Keras 3 in plain scripts.

A custom-loop script::

    from tf_hooks.elastic import ring, state as estate, data
    hvd = ring.init_horovod()                 # blocks until the driver puts this process in a ring
    st = estate.ElasticState(model.variables + optimizer.variables, epoch=0, cursor=0, step=0)

    @hvd.elastic.run
    def train(st): ...                         # read hvd.size()/hvd.rank() every step; st.commit() every K

Importing this package imports neither TensorFlow nor Horovod.
"""
