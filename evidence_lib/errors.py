"""The root of every exception evidence_lib raises on purpose; modules subclass it."""


class EvidenceError(Exception):
    """Something evidence_lib detected and can explain; the message says what to do."""
