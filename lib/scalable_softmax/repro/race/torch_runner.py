"""PyTorch in the race: CPU, float32, minibatches of ``batch_size`` rows.

``torch-sgd`` and ``torch-adam`` (full softmax: cross-entropy over all ``K`` classes) on
a sparse linear layer, ``W x`` for sparse ``x``; two standard layouts exist and a short
timed pilot picks the faster one per data set (:func:`torch_layouts`):
``embedding-bag`` (``nn.EmbeddingBag(D, K, mode="sum", sparse=True)`` with the feature
values as ``per_sample_weights``: sparse gradients, ``optim.SGD`` /
``optim.SparseAdam``) and ``sparse-mm`` (``torch.sparse.mm`` of the COO minibatch with a
dense ``D x K`` parameter: dense gradients, ``optim.SGD`` / ``optim.Adam``);
``torch-sampled``: sampled softmax with ``negatives`` classes drawn uniformly per
minibatch and shared by its rows (TensorFlow's ``sampled_softmax_loss`` convention: the
label's logit against the negatives' logits, a negative equal to the row's label masked,
the ``log Q`` correction constant for a uniform proposal and so dropped), class rows in
``nn.Embedding(K, D, sparse=True)``, ``optim.SGD``. The torch runs use the same
schedule as ours, ``lr * lr_decay**(epoch - 1)`` (the job's ``lr_decay``), at most
``max_epochs`` epochs. Their
options are checked against the registry's schema (:data:`.methods.METHODS`).
"""
from __future__ import annotations

import math
import time

import numpy as np

from scalable_softmax.repro.race.jobs import classify_failure
from scalable_softmax.repro.race.methods import METHODS, TORCH_LAYOUTS
from scalable_softmax.validation import check_options

__all__ = ["TORCH_LAYOUTS", "torch_layouts", "run_torch"]


class _TorchData:
    """The CSR arrays as torch tensors, reordered once per epoch."""

    def __init__(self, X, y):
        import torch

        self.N, self.D = X.shape
        self.X = X
        self.y = y
        self.torch = torch

    def epoch(self, perm):
        torch = self.torch
        Xp = self.X[perm]
        self.indptr = torch.from_numpy(Xp.indptr.astype(np.int64))
        self.indices = torch.from_numpy(Xp.indices.astype(np.int64))
        self.values = torch.from_numpy(Xp.data.astype(np.float32))
        self.labels = torch.from_numpy(self.y[perm].astype(np.int64))

    def batch(self, a, b):
        s, e = int(self.indptr[a]), int(self.indptr[b])
        return (self.indices[s:e], self.indptr[a:b] - s, self.values[s:e],
                self.labels[a:b])

    def coo(self, a, b):
        torch = self.torch
        ind, off, val, lab = self.batch(a, b)
        counts = self.indptr[a + 1:b + 1] - self.indptr[a:b]
        rows = torch.repeat_interleave(torch.arange(b - a), counts)
        Xb = torch.sparse_coo_tensor(torch.stack([rows, ind]), val, size=(b - a, self.D),
                                     is_coalesced=True, check_invariants=False)
        return Xb, lab


def _torch_model(method, layout, D, K, lr):
    """``(params, forward(data, a, b) -> loss, optimizer, weights() -> (D x K float32,
    "feature"))``."""
    import torch
    import torch.nn.functional as F

    if method == "torch-sampled":
        raise AssertionError("use _run_torch_sampled")
    if layout == "embedding-bag":
        # zeros given as the weight: the default init draws D x K normals (1.9 s at
        # K = 30,000) that the zeros would overwrite; nothing later draws from torch's
        # generator in these runs (the order comes from NumPy)
        emb = torch.nn.EmbeddingBag(D, K, mode="sum", sparse=True,
                                    _weight=torch.zeros(D, K))
        params = list(emb.parameters())

        def loss(data, a, b):
            ind, off, val, lab = data.batch(a, b)
            return F.cross_entropy(emb(ind, off, per_sample_weights=val), lab)

        opt = (torch.optim.SGD(params, lr=lr) if method == "torch-sgd"
               else torch.optim.SparseAdam(params, lr=lr))
        weight = emb.weight
    elif layout == "sparse-mm":
        weight = torch.nn.Parameter(torch.zeros(D, K))
        params = [weight]

        def loss(data, a, b):
            Xb, lab = data.coo(a, b)
            return F.cross_entropy(torch.sparse.mm(Xb, weight), lab)

        opt = (torch.optim.SGD(params, lr=lr) if method == "torch-sgd"
               else torch.optim.Adam(params, lr=lr))
    else:
        raise ValueError(f"unknown torch layout {layout!r}; use 'embedding-bag' or "
                         "'sparse-mm'")

    def weights():    # D x K as stored: evaluated without a transpose
        return weight.detach().numpy(), "feature"

    return loss, opt, weights


_LAYOUT_CACHE: dict = {}


def torch_layouts(X, y, K, method, batch_size=100, batches=10, max_seconds=None,
                  threads=2, lr=1e-3, dense_bound=True):
    """Seconds per minibatch of each layout of ``method`` (``torch-sgd`` or
    ``torch-adam``): one untimed step, then up to ``batches`` timed steps (fewer if a
    layout has used ``max_seconds``, default :data:`PILOT_SECONDS`), on the first rows.

    A layout is not timed further (its entry is then its first step's seconds) when
    that untimed first step already took :data:`PILOT_GIVE_UP` times the best seconds
    per step so far (at K = 30,000 a step of the dense-gradient layout takes 1-4 s,
    against 0.01-1.7 s). The dense layout ("sparse-mm") is not built at all when a
    timed lower bound of its first step, :data:`DENSE_FIRST_STEP_PASSES` passes that
    allocate and zero a ``D x K`` array (its weights, their gradient and the
    optimiser's state each are one), already exceeds that bar (``dense_bound=False``:
    it is always built, for a benchmark of both layouts). A layout that runs out
    of memory (a child's address-space cap) gets ``inf``. Each layout's model is freed
    before the next one is built.

    Returns ``(seconds, notes)``: ``{layout: seconds per step}`` and ``{layout: why it
    was skipped or failed}`` for the layouts that were not timed in full.
    """
    import gc

    import torch

    if max_seconds is None:
        max_seconds = PILOT_SECONDS
    torch.set_num_threads(threads)
    data = _TorchData(X, y)
    n = min(X.shape[0], batch_size * (batches + 1))
    data.epoch(np.arange(n))
    D = X.shape[1]
    out, notes = {}, {}
    for layout in TORCH_LAYOUTS:
        best = min([v for v in out.values() if math.isfinite(v)], default=math.inf)
        if layout == "sparse-mm" and dense_bound and math.isfinite(best):
            t0 = time.perf_counter()
            for _ in range(DENSE_FIRST_STEP_PASSES):
                z = torch.zeros(D, K)
                del z
            bound = time.perf_counter() - t0
            if bound > PILOT_GIVE_UP * best:
                out[layout] = bound
                notes[layout] = (f"not built: {DENSE_FIRST_STEP_PASSES} D x K passes took "
                                 f"{bound:.3g} s, above {PILOT_GIVE_UP:g} x the best "
                                 f"{best:.3g} s per step")
                continue
        failed = None
        try:
            out[layout], note = _time_layout(method, layout, data, n, D, K, lr,
                                             batch_size, best, max_seconds)
            if note:
                notes[layout] = note
        except (Exception, MemoryError) as exc:  # noqa: BLE001 -- memory only
            if classify_failure(exc) != "memory":
                raise
            # the message, not the exception: its traceback's frames hold the failed
            # layout's tensors
            failed = f"{type(exc).__name__}: {str(exc)[:200]}"
        if failed is not None:
            out[layout] = math.inf
            notes[layout] = "out of memory: " + failed
            gc.collect()     # after the except clause, which kept the frames alive
    return out, notes


def _time_layout(method, layout, data, n, D, K, lr, batch_size, best, max_seconds):
    """``(seconds per step, note)`` of one layout in :func:`torch_layouts` (its model is
    freed when this returns)."""
    loss, opt, _ = _torch_model(method, layout, D, K, lr)
    t0, steps, t_first = time.perf_counter(), 0, math.nan
    note = ""
    for s, a in enumerate(range(0, n, batch_size)):
        opt.zero_grad()
        loss(data, a, min(a + batch_size, n)).backward()
        opt.step()
        if s == 0:
            t_first = time.perf_counter() - t0
            if t_first > PILOT_GIVE_UP * best:
                note = (f"first step only: {t_first:.3g} s, above {PILOT_GIVE_UP:g} x the "
                        f"best {best:.3g} s per step")
                break
            t0 = time.perf_counter()
            continue
        steps += 1
        if time.perf_counter() - t0 > max_seconds:
            break
    return ((time.perf_counter() - t0) / steps if steps else t_first), note


#: see :func:`torch_layouts`
PILOT_GIVE_UP = 3.0
#: the seconds of timed steps a layout gets at most in :func:`torch_layouts`
PILOT_SECONDS = 0.5
#: ``D x K`` passes in the lower bound of the dense layout's first step (its weights,
#: their gradient, and the optimiser's state: one for SGD, two for Adam, of which one is
#: counted; the product of the sparse minibatch with the weights is not)
DENSE_FIRST_STEP_PASSES = 3


def _choose_layout(job, X, y, K, B):
    """``(layout, seconds, notes)``: the faster layout by :func:`torch_layouts` (cached
    per data set, method and minibatch size within this process, failures included).
    Raises ``MemoryError`` when every layout ran out of memory."""
    key = (job.data, job.split, job.method, B)
    if key not in _LAYOUT_CACHE:
        t, notes = torch_layouts(X, y, K, job.method, batch_size=B, threads=job.threads)
        _LAYOUT_CACHE[key] = (min(t, key=lambda k: t[k]), t, notes)
    layout, t, notes = _LAYOUT_CACHE[key]
    if not math.isfinite(t[layout]):
        raise MemoryError("every torch layout ran out of memory in the pilot: "
                          + "; ".join(f"{k}: {v}" for k, v in notes.items()))
    return layout, t, notes


def run_torch(job, X, y, K, rec):
    import torch

    torch.set_num_threads(job.threads)
    torch.manual_seed(job.seed)
    opts = check_options(METHODS[job.method].options, job.options, job.method)
    B = opts["batch_size"]
    N, D = X.shape
    data = _TorchData(X, y)
    info = {"batch_size": B}
    if job.method == "torch-sampled":
        m = opts["negatives"]
        info["negatives"] = m
        loss, opt, weights = _torch_sampled(D, K, job.lr, m)
    else:
        layout = opts["layout"]
        if layout == "auto":
            layout, pilot, notes = _choose_layout(job, X, y, K, B)
            info["layout_pilot_seconds_per_step"] = pilot
            if notes:
                info["layout_pilot_notes"] = notes
        info["layout"] = layout
        loss, opt, weights = _torch_model(job.method, layout, D, K, job.lr)
    rng = np.random.default_rng(job.seed)
    rec.record_start(weights, epoch=0, steps=0)
    steps = 0
    for e in range(1, job.max_epochs + 1):
        for g in opt.param_groups:
            g["lr"] = job.lr * job.lr_decay ** (e - 1)
        rec.start()
        data.epoch(rng.permutation(N))
        for a in range(0, N, B):
            opt.zero_grad()
            L = loss(data, a, min(a + B, N))
            if not torch.isfinite(L):
                rec.stop()
                rec.record(None, epoch=e - 1 + a / N, steps=steps)
                return "diverged", f"non-finite loss in epoch {e}", dict(info, steps=steps)
            L.backward()
            opt.step()
            steps += 1
            end = a + B >= N
            if rec.over() and not (end and e == job.max_epochs):
                rec.stop()
                rec.record(weights, epoch=e - 1 + min(a + B, N) / N, steps=steps)
                return "time cap", (f"stopped at the cap in epoch {e} after {steps} "
                                    "minibatches"), dict(info, steps=steps)
            if rec.due() and not end:
                rec.record(weights, epoch=e - 1 + (a + B) / N, steps=steps)
        rec.stop()
        if rec.due() or e == job.max_epochs:
            rec.record(weights, epoch=e, steps=steps)
    return "completed", f"{job.max_epochs} epochs", dict(info, steps=steps)


def _torch_sampled(D, K, lr, m):
    import torch
    import torch.nn.functional as F

    # class rows, from given zeros: the default init draws K x D normals (2.8 s at
    # K = 30,000) that zeros would overwrite, and moves the generator the negatives
    # are then drawn from
    emb = torch.nn.Embedding(K, D, sparse=True, _weight=torch.zeros(K, D))
    opt = torch.optim.SGD(emb.parameters(), lr=lr)

    def loss(data, a, b):
        ind, off, val, lab = data.batch(a, b)
        neg = torch.randint(0, K, (m,))
        cand, inv = torch.unique(torch.cat([lab, neg]), return_inverse=True)
        Wc = emb(cand)                                          # |cand| x D
        # the sparse gradient of emb must be built from a contiguous gradient (torch
        # 2.13 otherwise fails in the optimiser step with "a view of a leaf Variable")
        Wc.register_hook(lambda g: g.contiguous())
        logits = F.embedding_bag(ind, Wc.t(), off, per_sample_weights=val,
                                 mode="sum")                    # B x |cand|
        n = b - a
        true = logits.gather(1, inv[:n, None])
        negl = logits[:, inv[n:]]
        negl = negl.masked_fill(neg[None, :] == lab[:, None], float("-inf"))
        z = torch.cat([true, negl], dim=1)
        return F.cross_entropy(z, torch.zeros(n, dtype=torch.long))

    def weights():
        return emb.weight.detach().numpy()

    return loss, opt, weights
