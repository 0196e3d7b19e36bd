"""Unconstrained L-BFGS for the full-batch trainers of :mod:`scalable_softmax.methods.full`.

Why not only ``scipy.optimize.minimize(method="L-BFGS-B")``: L-BFGS-B handles bounds,
and its per-iteration bookkeeping (generalised Cauchy point, subspace minimisation over
the compact ``2m x 2m`` representation) costs several times the ``4 m n`` flops of the
plain two-loop recursion. On the One-vs-Each paper's 20 Newsgroups shape
(``n = K (D + 1) = 1.2 million`` parameters, ``m = 10``) L-BFGS-B's own time per
iteration was 1.6 times this module's (83 against 51 ms, more than two evaluations of
the objective and its gradient) in the run of ``benchmarks/bench_lbfgs.py`` recorded
in ``benchmarks/results/lbfgs.md`` (shared 2-core machine, load average 2.6). The
trainers have no bounds, so this module is the
textbook algorithm (Nocedal & Wright, *Numerical Optimization*, 2nd ed., Algorithms 7.4
and 7.5) in NumPy, with SciPy's strong-Wolfe line search
(:func:`scipy.optimize.line_search`, Algorithms 3.5 and 3.6) for the step length:

* direction ``d = -H g`` by the two-loop recursion (:func:`two_loop`) over the last
  ``m`` pairs ``s = x_{k+1} - x_k``, ``y = g_{k+1} - g_k``, with
  ``H_0 = (s^T y / y^T y) I`` from the newest pair;
* step ``alpha`` satisfying the strong Wolfe conditions (``c1 = 1e-4``, ``c2 = 0.9``),
  tried first at ``alpha = 1`` (at the first iteration, where there is no pair yet, at
  about ``1 / ||g||``, as SciPy's BFGS does);
* a pair with ``s^T y <= 1e-10 * y^T y`` is not stored (it would make ``H`` indefinite;
  cannot happen for a convex objective with an exact line search);
* if the line search fails, the memory is cleared and a steepest-descent step tried;
  if that fails too, the run stops (``message`` says so; the usual cause is a gradient
  target below what rounding allows).

Stops when ``max |g| <= gtol`` (the same test as L-BFGS-B's projected gradient with no
bounds), when an iteration's relative decrease
``(f_k - f_{k+1}) / max(|f_k|, |f_{k+1}|, 1)`` is ``<= ftol`` (L-BFGS-B's ``ftol``
test; ``ftol = 0``, the default: off), after ``maxiter`` iterations, or once
``maxfun`` evaluations are spent. These are scikit-learn's units: its
``LogisticRegression(solver="lbfgs", tol=tol)`` runs L-BFGS-B with ``gtol = tol`` and
``ftol = 64 eps`` on the mean loss plus ``||W||^2 / (2 C N)``, which is the objective
``F`` of :mod:`scalable_softmax.methods.full` with ``mu = 1/C``; so ``gtol=tol,
ftol=64 * np.finfo(float).eps`` asks for what scikit-learn asks for.

Each evaluation of ``fun`` returns the value and the gradient together (one pass), and
the line search never evaluates twice at the same point (:class:`_Cached`). A run can be
continued where it stopped, curvature pairs included, by passing back the ``state``
dict it filled (what :class:`scalable_softmax.methods.full.ExactTrainer` does between
epochs): the iterates are then those of one uninterrupted run.
:func:`bfgs_inverse_reference` is the dense NumPy matrix the two-loop recursion
applies, for tests.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.optimize

__all__ = ["LBFGSResult", "lbfgs", "two_loop", "bfgs_inverse_reference"]


@dataclass
class LBFGSResult:
    """``x``, ``fun``, ``jac`` at the last accepted iterate; ``nit`` iterations,
    ``nfev`` evaluations; ``success`` (``max |jac| <= gtol``) and a ``message``."""

    x: np.ndarray
    fun: float
    jac: np.ndarray
    nit: int
    nfev: int
    success: bool
    message: str


def two_loop(g, S, Y, rho, order):
    """``H g`` by the two-loop recursion (Nocedal & Wright Algorithm 7.4).

    ``S``, ``Y``: arrays whose rows ``order[0], ..., order[-1]`` hold the stored pairs
    from oldest to newest; ``rho[i] = 1 / (s_i^T y_i)``. ``H_0 = gamma I`` with
    ``gamma = s^T y / y^T y`` of the newest pair (``I`` when there is none).
    """
    q = np.array(g, dtype=np.float64, copy=True)
    a = {}
    for i in reversed(order):
        a[i] = rho[i] * (S[i] @ q)
        q -= a[i] * Y[i]
    if order:
        j = order[-1]
        q *= (S[j] @ Y[j]) / (Y[j] @ Y[j])
    for i in order:
        b = rho[i] * (Y[i] @ q)
        q += (a[i] - b) * S[i]
    return q


def bfgs_inverse_reference(pairs, n):
    """The dense inverse-Hessian approximation of L-BFGS for the given pairs
    ``[(s, y), ...]`` (oldest first): ``H_0 = gamma I`` (``gamma`` from the newest
    pair), then ``H <- (I - rho s y^T) H (I - rho y s^T) + rho s s^T`` per pair
    (Nocedal & Wright eq. 7.19). Plain NumPy, ``n x n``; for tests."""
    H = np.eye(n)
    if pairs:
        s, y = pairs[-1]
        H *= (s @ y) / (y @ y)
    eye = np.eye(n)
    for s, y in pairs:
        r = 1.0 / (s @ y)
        H = (eye - r * np.outer(s, y)) @ H @ (eye - r * np.outer(y, s)) + r * np.outer(s, s)
    return H


class _Cached:
    """``f`` and ``g`` of one evaluation of ``fun`` (which returns both), served to the
    line search's separate ``f(x)`` and ``fprime(x)`` calls at the same point."""

    def __init__(self, fun):
        self.fun = fun
        self.x = None
        self.nfev = 0

    def _at(self, x):
        if self.x is None or not np.array_equal(x, self.x):
            self.fval, self.gval = self.fun(x)
            self.x = np.array(x, copy=True)
            self.nfev += 1

    def f(self, x):
        self._at(x)
        return self.fval

    def fprime(self, x):
        self._at(x)
        return self.gval


def _line_search(ev, x, d, g, f, slope, *, first, c1, c2):
    """A step length along ``d`` (``slope = g^T d < 0``), or None.

    SciPy's strong-Wolfe search first, tried at ``alpha = 1`` (at about ``1/||g||``
    when ``first``: no curvature pair yet, SciPy's BFGS convention). Near the optimum
    the decrease a step can make (about ``|g|^2``) falls below the rounding of ``f``,
    and the sufficient-decrease test fails on rounding noise alone; then Hager and
    Zhang's approximate Wolfe conditions (SIAM J. Optim. 16, 2005, eq. 4.1 and the
    ``epsilon |f|`` allowance of their CG_DESCENT), which use the directional
    derivative instead, ``c2 slope <= g(a)^T d <= (2 delta - 1) slope`` with
    ``delta = 0.1`` and ``f(a) <= f + 1e-10 |f|``, are tried at that first step and
    at 5 halvings of it.
    """
    old_old = f + 0.5 * float(np.linalg.norm(g)) if first else None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*line search", category=RuntimeWarning)
        alpha, _, _, f_new, _, g_new = scipy.optimize.line_search(
            ev.f, ev.fprime, x, d, g, f, old_old, c1=c1, c2=c2, maxiter=20)
    if alpha is not None and g_new is not None and np.isfinite(f_new):
        return float(alpha)
    a = min(1.0, 1.01 / float(np.linalg.norm(g))) if first else 1.0
    for _ in range(6):
        xa = x + a * d
        fa = ev.f(xa)
        da = float(ev.fprime(xa) @ d)
        if np.isfinite(fa) and fa <= f + 1e-10 * abs(f) and c2 * slope <= da <= -0.8 * slope:
            return a
        a *= 0.5
    return None


def lbfgs(fun, x0, *, gtol=1e-8, maxiter=15000, memory=10, maxfun=None, callback=None,
          c1=1e-4, c2=0.9, ftol=0.0, state=None):
    """Minimise ``fun`` (returning ``(value, gradient)``) from ``x0`` (module docstring).

    Parameters
    ----------
    fun : callable ``x -> (float, ndarray)``; the gradient may be a buffer reused by
        ``fun`` (it is copied when kept).
    x0 : ndarray (n,)
    gtol : stop when ``max |g| <= gtol``
    maxiter : iterations at most
    memory : pairs kept (``m``)
    maxfun : evaluations at most (default ``max(20 maxiter, 100)``)
    callback : called as ``callback(nit, x, f, g)`` after every iteration
    c1, c2 : the Wolfe constants
    ftol : stop when an iteration's relative decrease of ``f`` is ``<= ftol`` (module
        docstring; 0: off)
    state : None or a dict. An empty dict is filled, at return, with what continuing
        needs (``x``, ``f``, ``g`` and the curvature pairs); a dict so filled, passed
        again with ``x0`` equal to its ``x``, continues that run without evaluating
        ``fun`` at ``x0`` again (``x0`` different from its ``x``: a fresh start).

    Returns
    -------
    LBFGSResult
    """
    if memory < 1:
        raise ValueError(f"memory must be >= 1; got {memory}")
    maxfun = max(20 * int(maxiter), 100) if maxfun is None else int(maxfun)
    ev = _Cached(fun)
    x = np.array(x0, dtype=np.float64, copy=True)
    n = x.size
    resume = (state is not None and "S" in state and state["S"].shape == (memory, n)
              and np.array_equal(state["x"], x))
    if resume:
        f, g = float(state["f"]), state["g"]
        S, Y, rho, order = state["S"], state["Y"], state["rho"], list(state["order"])
        ev.x, ev.fval, ev.gval = x.copy(), f, g
    else:
        f = ev.f(x)
        g = np.array(ev.gval, copy=True)
        S = np.empty((memory, n))
        Y = np.empty((memory, n))
        rho = np.empty(memory)
        order: list[int] = []
    nit = 0
    decreased = np.inf          # the last iteration's relative decrease
    message = f"maximum number of iterations ({maxiter}) reached"
    while True:
        if n == 0 or float(np.max(np.abs(g))) <= gtol:
            message = "converged: max |gradient| <= gtol"
            break
        if ftol > 0.0 and decreased <= ftol:
            message = "converged: relative decrease of f <= ftol"
            break
        if nit >= maxiter:
            break
        if ev.nfev >= maxfun:
            message = f"maximum number of evaluations ({maxfun}) reached"
            break
        alpha = None
        for _attempt in (0, 1):
            d = -two_loop(g, S, Y, rho, order)
            slope = float(g @ d)
            if not slope < 0.0:        # not a descent direction: restart from -g
                order.clear()
                d = -g
                slope = -float(g @ g)
            alpha = _line_search(ev, x, d, g, f, slope, first=not order, c1=c1, c2=c2)
            if alpha is not None:
                break
            if not order:
                break
            order.clear()                   # retry once with steepest descent
        if alpha is None:
            message = ("line search failed (no step satisfies the Wolfe conditions: the "
                       "gradient target may be below what rounding allows)")
            break
        s = alpha * d
        x_new = x + s
        # the line search's last evaluation may not be at x_new: make sure g belongs to it
        g_new = np.array(ev.fprime(x_new), copy=True)
        f_new = ev.f(x_new)
        yv = g_new - g
        sy = float(s @ yv)
        yy = float(yv @ yv)
        if sy > 1e-10 * yy:
            # order holds the slots 0..len-1 until it is full, then recycles the oldest
            slot = order.pop(0) if len(order) == memory else len(order)
            S[slot] = s
            Y[slot] = yv
            rho[slot] = 1.0 / sy
            order.append(slot)
        decreased = (f - float(f_new)) / max(abs(f), abs(float(f_new)), 1.0)
        x, f, g = x_new, float(f_new), g_new
        nit += 1
        if callback is not None:
            callback(nit, x, f, g)
    ginf = float(np.max(np.abs(g))) if n else 0.0
    if state is not None:
        state.clear()
        state.update(x=x, f=float(f), g=g, S=S, Y=Y, rho=rho, order=list(order))
    return LBFGSResult(x=x, fun=float(f), jac=g, nit=nit, nfev=ev.nfev,
                       success=ginf <= gtol, message=message)
