"""What a command does, as functions over typed values: which libtorch, preparation, join's
settings, the datasets, the walk-through and the mirror export.
"""
