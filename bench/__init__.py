"""libflow benchmarks: ``python -m bench`` runs them all and prints one table."""
