"""Hostile input: each way one API key could exhaust a process or corrupt what is stored."""
