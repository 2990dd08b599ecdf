"""Pictures of a plan: the self-contained HTML report of ``mtf-layout
--html`` (ARCHITECTURE: "Pictures are outputs like JSON").

* :mod:`~autolayout.render.views`: what is drawn, as values taken from the
  JSON records (the time decomposition, the memory curve over the step, the
  counterfactual of each rule and decision);
* :mod:`~autolayout.render.text`: words and numbers (the CLI's formatting);
* :mod:`~autolayout.render.figures`: one Plotly figure per function;
* :mod:`~autolayout.render.page`: the page, plotly.js inline.

Example:
  >>> from autolayout.render import views
  >>> views.time_terms({"compute_time_s": 1.0, "comm_time_by_axis_s": {},
  ...                   "hidden_comm_time_s": 0.0})[0].name
  'compute'
"""

from autolayout.render.page import build, write
from autolayout.render.views import LayoutView, layout_view

__all__ = ["LayoutView", "build", "layout_view", "write"]
