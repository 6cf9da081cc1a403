"""The file library: records and uploads, folders, search, embeddings, and processing."""
