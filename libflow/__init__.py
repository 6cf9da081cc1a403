"""libflow: a self-hostable file library, workflow runner and webhook receiver."""

__version__ = "0.1.0"
