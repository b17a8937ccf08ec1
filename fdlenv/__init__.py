"""fdlenv: locked, content-addressed libtorch environments and the flodl dial-in worker."""

__version__ = "0.1.0"
