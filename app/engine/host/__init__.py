"""What the host offers (probe) and the transport and allocator chosen for it (pick)."""
