"""The store: locked, content-addressed environments under `$FLODL_HOME/envs`.

Read in this order: records (what a variant is made of) -> envkey (its
identity) -> fastpath (the re-dial answer without parsing anything) ->
realise (fetch, verify, install in a worker, publish by rename) ->
activation (the environment children run with) -> pointers (flodl's
`libtorch/` view) -> maintain (list, verify, gc).
"""
