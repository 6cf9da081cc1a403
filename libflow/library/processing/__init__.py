"""Processing a file: extract its text, chunk it, render its thumbnail (CPU-bound, off the loop)."""
