"""The project file (fdl.yml): found, loaded and checked, as records the join settings are made of.

`fdlenv join` reads the same project file as flodl's `fdl join`, so a golden
image can bake one `join:` block and boot into a bare `fdlenv join`. The
package is split so that each caller imports only what it uses:

- `model`: the records (`Project`, `JoinBlock`, `JoinFlags`, `JoinSettings`,
  `SshConfig`, `SourceSpec`, ...) and plain constants. Standard library only;
  the join loop, the tunnel and `source` import just this.
- `grammar`: the one-line string grammars (controller address, `--ssh`,
  `--devices`, gpu_ram_share) and the local host name.
- `schema`: validates the merged mapping into the model; strict, so an
  unknown key is a load error, as in flodl.
- `load`: `load_project()` finds fdl.yml (through `fdlenv.config.fdlfile`), merges its
  `inherit-from:` chain and the `FDL_ENV` overlay, then hands the result to
  `schema`.
- `token`: reads the token file the join settings chose, once.

Order on a run: load -> schema, then `app.joinsettings.resolve` (above config, since it
also takes the store's settings) puts the command-line flags over the `join:` and
`fdlenv:` blocks with model and grammar. Layers: model <- grammar <- schema <- load.
This file imports nothing, so importing `fdlenv.config.model` does not pull in yaml or
the loader; import each name from the module that defines it.
"""
