"""The experiments of Fagan & Iyengar (2018), "Unbiased scalable softmax optimization":
what notebooks 00 to 07, 11 and 13 compute (U-max, Implicit SGD and the sampled
baselines; the paper's derivations, instability demo, main study, rate tuning and
sensitivity, formulations, Table 3, runtime, and the study at large K), with the paper's
printed numbers and the authors' recorded runs (:mod:`.paper`). The map of the whole
collection is :mod:`scalable_softmax.repro`'s docstring.
"""
