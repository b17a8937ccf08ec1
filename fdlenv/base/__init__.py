"""What every layer shares: failure as a type, output, progress, whole-or-nothing files, file locks,
hashing, the network's bounds, strict YAML, and the process's own rules (children, malloc).
"""
