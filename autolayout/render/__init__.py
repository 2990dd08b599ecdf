"""Pictures of a plan: the self-contained HTML report of ``mtf-layout
--html`` (ARCHITECTURE: "Pictures are outputs like JSON").

* :mod:`~autolayout.render.views`: what is drawn, as values taken from the
  JSON records (the time decomposition, the memory curve over the step, the
  counterfactual of each rule and decision);
* :mod:`~autolayout.render.text`: words and numbers (the CLI's tables
  format with the same functions);
* :mod:`~autolayout.render.figures`: one Plotly figure per function;
* :mod:`~autolayout.render.page`: the page, plotly.js inline.

Only ``text`` loads with the CLI; the rest (and plotly) load when a report
is written.

Example:
  >>> from autolayout.render import views
  >>> views.time_terms({"compute_time_s": 1.0, "comm_time_by_axis_s": {},
  ...                   "hidden_comm_time_s": 0.0})[0].name
  'compute'
"""
