"""libflow's background jobs and the arq worker that runs them."""
