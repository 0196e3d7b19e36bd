"""Sphinx settings of the project's static site (``make site``).

The site is built by ``python -m scalable_softmax.repro.site build``, which stages the README
(as the front page), the math notes (docs/math.md), the executed notebooks and the
committed tables and figures into ``build/site-src`` and runs Sphinx there with this
file (``sphinx-build -c docs/site``). Everything is local: no page loads anything from
the network.
"""
import scalable_softmax

project = "Unbiased scalable softmax"
author = "the scalable_softmax authors"
release = version = scalable_softmax.__version__
copyright = "the scalable_softmax authors (MIT licence)"

extensions = ["myst_nb"]
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# the notebooks arrive executed (papermill runs them): never execute them here
nb_execution_mode = "off"
# widget outputs are removed when staging; never load the widget manager from a CDN
nb_ipywidgets_js = {}
# stderr of a cell (warnings) is shown as it was, in its own box
nb_output_stderr = "show"
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

html_theme = "furo"
html_title = "Unbiased scalable softmax: a reproducible notebook collection"
html_show_sourcelink = False
html_copy_source = False
html_last_updated_fmt = None
