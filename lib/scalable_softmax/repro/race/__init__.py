"""The race of notebooks 12 (peers) and 14 (crossover) read as a benchmark reads it.

* :mod:`.methods` -- the one method registry: each method's library, family, label,
  whether it has a rate, its runner and its options' schema;
* :mod:`.jobs` -- a run (:class:`~.jobs.Job`), its checkpoints and the recorder that
  keeps the training clock (paused while evaluating); running jobs in this process;
* :mod:`.isolate` -- running jobs in a child process with a memory cap, the thread
  variables set and a wall-clock limit;
* :mod:`.problems` -- a data set as the runs read it, the training rows and evaluation
  sets of a job, the sealed test rows, notebook 14's problems at every K;
* :mod:`.ours`, :mod:`.exact`, :mod:`.sklearn_runner`, :mod:`.torch_runner` -- the
  runners: our trainers (their epochs cut into pieces), our exact L-BFGS,
  scikit-learn's and PyTorch's models;
* :mod:`.families` -- how a workload is named on a page (and the registry's families);
* :mod:`.split` -- the validation split carved from the training data, and the test rows
  sealed;
* :mod:`.scoring` -- targets, time to each level at validation checkpoints, test
  log-loss only at the checkpoint a level was first reached, family verdicts over seeds
  and performance profiles (pure functions);
* :mod:`.run` -- the search spaces, and one workload's race: tuning by time to the 5%
  target on validation (the same number of candidates per method), the chosen
  configurations over seeds, the rows of the targets tables and their verdicts;
* :mod:`.cli` -- a notebook's race end to end (``params/race.yaml``), writing
  ``<notebook>-targets.csv``, ``-targets-verdicts.csv``, ``-targets-tuning.csv`` and
  ``-targets-curves.csv`` (every seeded run's validation checkpoints);
* :mod:`.journal` -- each finished workload kept until the race ends, so that a stopped
  race resumes when rerun (same parameters, code, libraries, targets and data);
* :mod:`.report` -- what notebooks 12 and 14 and the pages say and draw from the race's
  tables (verdict sentences, notebook 14's crossover K per level and its figure, the
  notebooks' checks of the tables);
* :mod:`.plots` -- the race's figures (performance profiles, learning curves on
  validation scaled to the targets) and series styles;
* :mod:`.targets` -- the reference runs that fix the targets before the race
  (``make targets``: ``tables/targets.csv``, ``params/targets.yaml``).
"""
