"""Measurements, never assertions: throughput runs (`throughput`) whose participants are separate
processes (`participants`), and the starvation experiment (`starvation`)."""
