"""Durable receipts of answered batches: the store interface, SQLite and PostgreSQL stores,
opening one from a URL, and the retention pruner."""
