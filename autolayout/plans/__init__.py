"""Plans as values and files: the frozen :class:`~autolayout.plans.plan.Plan`,
its versioned JSON file, the graph identity it checks, ``diff`` of two
plans, warm re-solves from a plan (hint) and exports to other frameworks."""
