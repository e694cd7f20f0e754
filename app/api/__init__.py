"""The HTTP API: one router module per resource."""
