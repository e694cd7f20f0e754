"""The UMA pool: planning, memory sources, the slab allocator and the heap fallback."""
