"""Ingest: JSON Lines in, multi-partition L0 files out, the way an agent writes them."""
