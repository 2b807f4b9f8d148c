"""A small public library: books, members and loans. (made by orchlib.synth)."""
