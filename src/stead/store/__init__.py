"""Stores: the journal on SQLite (and later PostgreSQL). They know nothing of agents."""
