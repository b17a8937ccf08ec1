"""Training source: spec grammar, fetch (file/rsync/git), run manifest, tree digest, build.

Order on every dial: parse (a typo fails before anything moves), claim the
tree, fetch + digest, read the manifest (and check the published digest),
then build by content key. See fetch.claimed() for why the claim spans all.
"""
