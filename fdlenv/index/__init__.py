"""Wheel indexes: pip's and uv's configuration, channel mirrors, the simple API client and the
resolver's provider over it.
"""
