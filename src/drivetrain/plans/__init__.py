"""Plans as DAGs of steps, and the scheduler that runs them."""
