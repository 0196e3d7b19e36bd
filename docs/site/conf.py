"""Sphinx settings of the project's static site (``make site``).

The site is built by ``python -m scalable_softmax.repro.machinery.site build``, which
stages the README (as the front page), the math notes (docs/math.md), the executed
notebooks and the committed tables and figures into ``build/site-src`` and runs Sphinx
there with this file (``sphinx-build -c docs/site``). Everything is local: no page loads anything from
the network.
"""
import scalable_softmax

project = "Unbiased scalable softmax"
author = "the scalable_softmax authors"
release = version = scalable_softmax.__version__
copyright = "the scalable_softmax authors (MIT licence)"

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# the notebooks arrive executed (papermill runs them): never execute them here
nb_execution_mode = "off"
# widget outputs are removed when staging; never load the widget manager from a CDN
nb_ipywidgets_js = {}
# stderr of a cell (warnings) is shown as it was, in its own box
nb_output_stderr = "show"
# a cell's Markdown output (display(Markdown(...)): the tables of notebooks 06, 11 and
# 12) is parsed as GitHub-flavoured Markdown, so that its pipe tables become tables
# (myst-nb's default, CommonMark, has no tables and shows them as one line of pipes)
nb_render_markdown_format = "gfm"
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

html_theme = "furo"
html_title = "Unbiased scalable softmax: a reproducible notebook collection"
html_show_sourcelink = False
html_copy_source = False
html_last_updated_fmt = None
# a table wider than the page scrolls sideways instead of being cut at the right edge
# (docs/site/_static/site.css); `make site-check` measures it in the browser
html_static_path = ["_static"]
html_css_files = ["site.css"]

# the API reference (docs/api.md): docstrings in numpydoc style, read by napoleon
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": False}


def setup(app):
    """The ``method-table`` directive of docs/api.md: the registered methods and the
    facts their trainer classes declare
    (:func:`scalable_softmax.repro.machinery.site.method_table`)."""
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective

    from scalable_softmax.repro.machinery.site import method_table

    class MethodTable(SphinxDirective):
        def run(self):
            box = nodes.container()
            self.state.nested_parse(StringList(method_table(), source="method-table"),
                                    self.content_offset, box)
            return box.children

    app.add_directive("method-table", MethodTable)
    return {"parallel_read_safe": True}
