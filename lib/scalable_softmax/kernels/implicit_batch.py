"""The pieces of one Newton iteration of implicit-batch's reduced problem
(:mod:`scalable_softmax.methods.implicit_batch`, docs/math.md section 5); all callable
from numba code only, each documented where it is defined.

``direction_workspace(s, r, q)``
    the scratch arrays of the direction for ``s`` points, rank ``r``, ``q`` classes.
``gradient(Bm, PI, D1, ypos, Cm, rho, g, grad)``
    the gradient at the iterate.
``structured_direction(Bm, PI, ypos, D1, D2, rho, grad, p, ws)``
    the Newton direction through the structured (Cholesky and capacitance) solve.
``ls_factor(Bm, PI, ypos, D1, D2, rho, ws)``, ``ls_solve(Bm, PI, D1, D2, grad, p, ws)``
    the same solve split into its factorisation and its substitutions (chord steps
    reuse the factorisation).
``score_change(Bm, p, PT, ZP)``
    the change of the scores along the direction.
``scores_value(Z, ypos, logw, alpha, ubar, order, PI, D1, D2, uout)``,
``ridge_value(Cm, rho, g)``
    a trial point's objective (its scores part, with the softmax pieces the next
    iteration uses, and its ridge part).
``solve_reduced``
    the whole solver of the reduced problem, built from the above.
"""
from scalable_softmax.methods.implicit_batch import _direction_workspace as direction_workspace
from scalable_softmax.methods.implicit_batch import _gradient as gradient
from scalable_softmax.methods.implicit_batch import _ls_factor as ls_factor
from scalable_softmax.methods.implicit_batch import _ls_solve as ls_solve
from scalable_softmax.methods.implicit_batch import _ridge_value as ridge_value
from scalable_softmax.methods.implicit_batch import _score_change as score_change
from scalable_softmax.methods.implicit_batch import _scores_value as scores_value
from scalable_softmax.methods.implicit_batch import _solve_reduced as solve_reduced
from scalable_softmax.methods.implicit_batch import (
    _structured_direction as structured_direction,
)

__all__ = ["direction_workspace", "gradient", "structured_direction", "ls_factor",
           "ls_solve", "score_change", "scores_value", "ridge_value", "solve_reduced"]
