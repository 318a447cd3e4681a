"""Downstream applications that validate the engine in use."""
