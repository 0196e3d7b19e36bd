"""The race of notebooks 12 (peers) and 14 (crossover) read as a benchmark reads it.

* :mod:`.families` -- the race's methods by family (one registry), and the family
  verdicts read from the record's current tables (target: the best test log-loss of any
  method, one seed);
* :mod:`.split` -- the validation split carved from the training data, and the test rows
  sealed;
* :mod:`.scoring` -- targets, time to each level at validation checkpoints, test
  log-loss only at the checkpoint a level was first reached, family verdicts over seeds
  and performance profiles (pure functions);
* :mod:`.run` -- one workload's race: tuning by time to the 5% target on validation
  (the same number of candidates per method), the chosen configurations over seeds,
  the rows of the targets tables and their verdicts;
* :mod:`.cli` -- a notebook's race end to end (``params/race.yaml``), writing
  ``<notebook>-targets.csv``, ``-targets-verdicts.csv`` and ``-targets-tuning.csv``;
* :mod:`.report` -- what notebooks 12 and 14 and the pages say and draw from the race's
  tables (verdict sentences, notebook 14's crossover K per level and its figure);
* :mod:`.targets` -- the reference runs that fix the targets before the race
  (``make targets``: ``tables/targets.csv``, ``params/targets.yaml``).
"""
