"""The database: connection and migrations, outages, group commit, and the fast raw reads."""
