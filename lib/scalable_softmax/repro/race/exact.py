"""Our exact full-batch L-BFGS in the race (``exact``): the library's
:class:`~scalable_softmax.methods.full.ExactTrainer` objective kernel, driven by one
``scipy.optimize.minimize(method="L-BFGS-B")`` call whose callback evaluates at the
checkpoints, so the curvature pairs are kept throughout; the run stops inside the
objective once the cap has passed (a line search may evaluate several times per
iteration).
"""
from __future__ import annotations

import numpy as np

__all__ = ["run_exact"]


class _CapReached(Exception):
    """Raised inside the L-BFGS objective once the time cap has passed."""


def run_exact(job, X, y, K, rec):
    import scipy.optimize

    from scalable_softmax.methods.full import ExactTrainer

    opts = dict(gtol=1e-8, memory=10)
    opts.update(job.options)
    tr = ExactTrainer(X, y, K, mu=0.0, iters_per_epoch=None, **opts)
    tr.init_params()
    tr.warmup()
    D = X.shape[1]
    rec.record_start(tr.W, iteration=0)
    state = {"it": 0, "stopped": False}

    def callback(intermediate_result):
        rec.stop()
        state["it"] += 1
        x = intermediate_result.x
        state["x"] = x.copy()    # (the clock is stopped here)
        if rec.over():
            rec.record((x.reshape(D, K), "feature"), iteration=state["it"])
            state["stopped"] = True
            raise StopIteration
        if rec.due():
            rec.record((x.reshape(D, K), "feature"), iteration=state["it"])
        rec.start()

    def fun(x):
        # a line search may evaluate several times per iteration: stop there too
        if rec.over():
            raise _CapReached
        return tr._fun(x)

    rec.start()
    x0 = np.ascontiguousarray(tr.W.T).ravel()
    try:
        res = scipy.optimize.minimize(
            fun, x0, jac=True, method="L-BFGS-B", callback=callback,
            options=dict(maxiter=100000, gtol=tr.opts["gtol"], ftol=0.0,
                         maxcor=tr.opts["memory"], maxfun=10 ** 7))
    except _CapReached:
        rec.stop()
        if "x" in state:       # the last accepted iterate, at the time the cap passed
            rec.record((state["x"].reshape(D, K), "feature"), iteration=state["it"])
        why = (f"the cap passed during L-BFGS iteration {state['it'] + 1} (after "
               f"{tr.nfev} objective evaluations)" if tr.nfev else
               "the cap passed before the first objective evaluation had finished")
        return "time cap", why, {"iterations": state["it"], "nfev": tr.nfev}
    rec.stop()
    info = {"iterations": int(res.nit), "message": str(res.message), "nfev": tr.nfev}
    if state["stopped"]:
        return "time cap", f"stopped after L-BFGS iteration {state['it']} at the cap", info
    rec.record((res.x.reshape(D, K), "feature"), iteration=int(res.nit))
    return "completed", f"L-BFGS stopped: {res.message} after {res.nit} iterations", info
