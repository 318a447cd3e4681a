"""What several scenarios share: a scenario's server and database (`setup`) and the read-back
queries gates are computed from (`readback`)."""
