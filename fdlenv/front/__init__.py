"""The command layer: the CLI, its parser, one module per command; nothing below it sees a Namespace.
"""
