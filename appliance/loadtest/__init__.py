"""Side area: workloads, the load generator, its statistics, reports, plots and the scheduler comparison."""
