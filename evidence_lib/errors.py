"""The root of every exception evidence_lib raises on purpose; modules subclass it."""


class EvidenceError(Exception):
    """Something evidence_lib detected and can explain; the message says what to do."""


class BadInput(EvidenceError):
    """The command line asked for something that cannot be (a bad option value, an unknown
    PostgreSQL major, a folder that is not a bundle): the CLI says so in one line, exit code 2,
    before anything runs."""
