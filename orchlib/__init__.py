"""orchlib."""
