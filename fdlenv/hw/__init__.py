"""GPU survey and `auto` routing.

`survey.survey()` says what this box has (devices plus findings that explain an
absence), `routing.route()` turns that into a variant with a human reason, and
`coverage.covers()` says whether a variant's arch list serves a device. The
split keeps routing pure: it sees only a `Survey`, never the hardware.
`gates` runs first and decides whether `nvidia`/`amd` (and their libraries)
are imported at all; `spoof` replaces both when FLODL_TESTING_GPU_JSON is set;
`masks` applies last.
"""
