"""Model-based checking: a reference model, random histories against the real database."""
