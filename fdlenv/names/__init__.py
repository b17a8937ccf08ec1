"""The names every layer shares: the libtorch variants, this machine's conda platform, and where the
home keeps each thing (its layout, a lease's file, a variant's build tree).
"""
