"""The project file (fdl.yml) and the join settings made from it.

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
- `resolve`: `resolve()` puts the command-line flags over the `join:` and
  `fdlenv:` blocks; pure, so it is table-tested.

Order on a run: load -> schema -> resolve. Layers: model <- grammar <- schema
<- load; resolve uses model and grammar only. This file imports nothing, so
importing `fdlenv.config.model` does not pull in yaml, the loader or resolve;
import each name from the module that defines it.
"""
