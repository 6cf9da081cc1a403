"""Workflows: versions, runs and their records, and what a run's nodes may reach."""
