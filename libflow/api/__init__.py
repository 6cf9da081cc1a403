"""HTTP: handlers by area, auth, request bodies, rendering, errors, and the OpenAPI document."""
