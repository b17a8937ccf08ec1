"""One module per `fdlenv` command: argparse wiring plus a thin run() that calls the library."""
