"""The layout search of one graph on one mesh: the networkx view of named
dims, valid assignments, per-op cost tables, the CP-SAT program (written out
as math in :mod:`~autolayout.search.formulation`), its phases and validation,
:class:`~autolayout.search.solve.LayoutSearch`, :class:`LayoutResult`, the
Pareto front and ``explain``."""
