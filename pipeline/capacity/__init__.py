"""Capacity arithmetic: the sizing formulas of R-LAB-1..R-LAB-5, pure (no I/O, no fleet imports).

* :mod:`.formulas` -- Little's law, capacity, backlog and drain time, the redelivery bound, the
  poison stall, the slow batch against ``max.poll.interval.ms``.

The lab's model (``fleet lab predict``) and the lag monitor's drain estimate
(:mod:`pipeline.observability.drain`) both compute with these, so the two never disagree.
"""
