"""The race of notebooks 12 (peers) and 14 (crossover) read as a benchmark reads it.

* :mod:`.families` -- the race's methods by family (one registry), and the family
  verdicts read from the record's current tables (target: the best test log-loss of any
  method, one seed).
"""
