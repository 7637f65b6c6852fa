"""How a run executes, as collaborators with one job each (``ilmek.engine`` holds the entry points).

* :mod:`.setup`: what a run is (its graph, thread, options) and the event numbering;
* :mod:`.lifecycle`: one run from start to end: hold the thread, start,
  resume or fork, loop over supersteps, end (recording a failure);
* :mod:`.answers`: a resume's answers, checked and recorded;
* :mod:`.position`: the run's place in its thread: what it commits, after which checkpoint;
* :mod:`.superstep`: one superstep: plan its tasks, run them, fold, commit or pause;
* :mod:`.tasks`: the worker pool, the typed messages between workers and
  the driving thread, retries, and the storage work workers hand over;
* :mod:`.messages`: those messages.

Nothing here imports a backend or names a framework: everything the run
reads and writes goes through the :class:`~ilmek.checkpoint.base.Checkpointer`
port, and whether tasks may share the caller's thread is asked of it.
"""
