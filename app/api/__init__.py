"""The HTTP layer: FastAPI routers, one module per resource."""
