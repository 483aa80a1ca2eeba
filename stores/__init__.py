"""Where records live: an in-memory reference store, SQLite, files and PostgreSQL."""
