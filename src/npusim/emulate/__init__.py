"""Cycle-by-cycle reference machines for small cases: PEs with their registers, operands
moving one PE per cycle. They compute real outputs and count cycles, and so check the
fast models of ``npusim.dataflows`` (same outputs, bit-identical in int8; same cycles).
"""
