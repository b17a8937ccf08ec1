"""Making conda packages: the archive writer and `fdlenv pack libtorch`."""
