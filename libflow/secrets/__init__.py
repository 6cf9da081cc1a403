"""Secrets at rest: project secrets and webhook signing secrets, sealed with AES-GCM.

``crypto`` holds the key (derived from ``LIBFLOW_SECRET_KEY``) and the sealed format,
``store`` a project's named secrets, ``rotation`` re-sealing every row under a new key.
"""
