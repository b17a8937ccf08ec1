"""fdlenv.app.prepare: the step order, the GPU and arch gates, the env and build steps, notes.

Steps run in-process against a real store (a real channel and lock from
helpers_store) with an injected survey, $HOME, temp dir and mounts table.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers_source import write_tree
from helpers_store import make_world

from fdlenv.names.variants import parse
from fdlenv.config.model import JoinSettings, SourceSpec, SshConfig
from fdlenv.names.variants import Libtorch
from fdlenv.base.errors import Fail
from fdlenv.names.home import Home
from fdlenv.hw.model import AMD, NVIDIA, Device, Finding, Survey
from fdlenv.app.prepare import Prepared, PrepareRequest, arch_gate, gpu_gate, prepare, read_archs, request_from_settings
from fdlenv.source import manifest
from fdlenv.source.manifest import RunManifest
from fdlenv.store.env import Env
from fdlenv.store.pointers import active_label
from fdlenv.store.realise import realise

RECIPE = ('mkdir -p target/release && echo run >> "$PREP_RUNS" && '
          'printf "%s|%s|%s" "$LIBTORCH_PATH" "$FDL_GPU_FEATURE" "${HOOK_MARK:-}" > target/release/train')
RTX = Device(NVIDIA, 0, "RTX 3090", "8.6", 24000)
MI = Device(AMD, 0, "MI300X", "gfx942", 192000)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("world"), variants=("cpu", "cu128", "rocm7.1"))


def no_survey():
    raise AssertionError("surveyed although nothing needed the hardware")


def run(tmp_path, survey=no_survey, **req) -> Prepared:
    if isinstance(req.get("libtorch"), str):   # the token as the front hands it on: parsed once
        req["libtorch"] = parse(req["libtorch"])
    home = Home(tmp_path / "home")
    return prepare(PrepareRequest(**{"gpu_gate": False, **req}), home, survey=survey,
                   user_home=str(tmp_path / "user"), stage=tmp_path, proc_mounts=tmp_path / "no-mounts",
                   cwd=tmp_path)


def fail_of(fn, *a, **kw) -> Fail:
    with pytest.raises(Fail) as e:
        fn(*a, **kw)
    return e.value


@pytest.fixture
def runs(tmp_path, monkeypatch):
    counter = tmp_path / "runs"
    monkeypatch.setenv("PREP_RUNS", str(counter))
    return lambda: len(counter.read_text().splitlines()) if counter.exists() else 0


def published_tree(tmp_path, **fields) -> Path:
    src = write_tree(tmp_path / "src", {"src/main.rs": "fn main() {}\n"})
    m = RunManifest(**{"bin": "target/release/train", "build": RECIPE, **fields})
    (src / ".fdl-run.yml").write_text(manifest.dump(m))
    return src


# ------------------------------------------------------------------ step 1

def test_the_gpu_gate_blocks_exactly_when_there_is_no_usable_device():
    explained = (Finding("hardware_unusable", "amd 0 (gfx1036 iGPU): no ROCm"),)
    gpu_gate(Survey((RTX,), explained))                      # a mixed box with an unusable iGPU passes
    f = fail_of(gpu_gate, Survey((), explained + (Finding("mask_applied", "CUDA_VISIBLE_DEVICES= hides all"),)))
    assert not f.transient
    assert "no usable GPUs detected: amd 0 (gfx1036 iGPU): no ROCm; CUDA_VISIBLE_DEVICES= hides all" in f.message
    assert "no rank to offer" in f.message and "fdlenv detect" in f.message
    f = fail_of(gpu_gate, Survey())
    assert "no GPUs detected on this host (no NVIDIA or AMD device found)" in f.message


def test_the_gpu_gate_runs_first_and_only_when_asked(tmp_path):
    f = fail_of(run, tmp_path, survey=lambda: Survey(), gpu_gate=True, data_path=str(tmp_path / "nope"))
    assert "no GPUs detected" in f.message
    # without the gate a bad data_path is the first failure, and nothing was surveyed
    f = fail_of(run, tmp_path, data_path=str(tmp_path / "nope"))
    assert f.message.startswith("data_path:")


# ------------------------------------------------------------------ order

def test_the_steps_fail_in_order(tmp_path, world):
    bad_source = SourceSpec("file:relative")
    # data before dirs
    f = fail_of(prepare, PrepareRequest(data_path=str(tmp_path / "nope"), source=bad_source, gpu_gate=False),
                Home(tmp_path / "home"), survey=no_survey, stage=tmp_path / "no-stage")
    assert f.message.startswith("data_path:")
    # dirs before the source
    f = fail_of(prepare, PrepareRequest(source=bad_source, gpu_gate=False), Home(tmp_path / "home"),
                survey=no_survey, user_home=str(tmp_path), stage=tmp_path / "no-stage")
    assert "disk stage" in f.message


def test_a_broken_source_spec_fails_before_any_env_is_fetched(tmp_path, world):
    f = fail_of(run, tmp_path, libtorch="cpu", lock=str(world.lock), source=SourceSpec("/srv/train"))
    assert not f.transient and f.message.startswith("source:") and "file://" in f.message
    assert not (tmp_path / "home" / "envs").exists() and not (tmp_path / "home" / "archives").exists()


def test_a_missing_manifest_without_a_bin_waits_before_any_env_is_fetched(tmp_path, world):
    src = write_tree(tmp_path / "src", {"main.rs": "x"})
    f = fail_of(run, tmp_path, libtorch="cpu", lock=str(world.lock), source=SourceSpec(f"file://{src}"))
    assert f.transient and "fdl publish" in f.message
    assert not (tmp_path / "home" / "envs").exists()
    assert any(n.startswith("source: copied") for n in f.notes)


def test_notes_survive_a_failure(tmp_path):
    f = fail_of(prepare, PrepareRequest(source=SourceSpec("smb://x/y"), gpu_gate=False), Home(tmp_path / "h"),
                survey=no_survey, user_home="", stage=tmp_path, proc_mounts=tmp_path / "none")
    assert f.message.startswith("source:")
    assert any("HOME is unset" in n for n in f.notes)


# ------------------------------------------------------------------ step 5

def fake_env(tmp_path, variant: str, archs: str | None):
    """A realised env's layout, as the `Active` prepare settles it to (what the gate reads)."""
    from fdlenv.store.active import of_env

    root = tmp_path / f"env-{variant}" / "libtorch"
    (root / "lib").mkdir(parents=True, exist_ok=True)
    if archs is not None:
        (root / ".arch").write_text(f"cuda=12.8\ntorch=2.10.0\narchs={archs}\nsource=locked\n")
    return of_env(Env(variant, "k" * 64, root.parent, root))


def test_a_variant_covering_none_of_the_offered_cards_is_refused(tmp_path):
    box = lambda: Survey((RTX, MI))  # noqa: E731
    f = fail_of(arch_gate, fake_env(tmp_path, "cu128", "0.0"), box, None)
    assert not f.transient and "no kernel image is available" in f.message
    assert "precompiled/cu128" in f.message and "nvidia 0 (RTX 3090, 8.6)" in f.message
    assert "--libtorch auto" in f.message and "--devices" in f.message and "MI300X" not in f.message
    arch_gate(fake_env(tmp_path, "cpu", "0.0"), no_survey, None)           # cpu: no survey at all
    arch_gate(fake_env(tmp_path, "cu126", None), no_survey, None)          # no metadata
    arch_gate(fake_env(tmp_path, "rocm7.0", ""), no_survey, None)          # empty archs= line
    arch_gate(fake_env(tmp_path, "cu128", "0.0"), no_survey, ())           # an explicitly empty offer


def test_the_arch_gate_only_checks_offered_cards_of_the_variants_vendor(tmp_path):
    env = fake_env(tmp_path, "cu128", "sm_80;sm_90")
    cards = (Device(NVIDIA, 0, "RTX 5090", "12.0", 1), Device(NVIDIA, 1, "A10", "8.6", 1), MI)
    box = lambda: Survey(cards)  # noqa: E731
    assert "RTX 5090" in fail_of(arch_gate, env, box, None).message
    arch_gate(env, box, (1,))                                              # only the covered card offered
    assert "RTX 5090" in fail_of(arch_gate, env, box, (0, 1)).message
    rocm = fake_env(tmp_path, "rocm7.1", "gfx90a gfx1100")
    assert "MI300X" in fail_of(arch_gate, rocm, box, None).message
    arch_gate(rocm, lambda: Survey((RTX,)), None)                          # no AMD card: nothing to refuse


def test_read_archs_takes_the_archs_line(tmp_path):
    assert read_archs(fake_env(tmp_path, "cu128", "7.0 8.6").dir) == "7.0 8.6"
    assert read_archs(tmp_path / "nowhere") == ""


def test_a_requested_variant_is_realised_activated_and_activated_for_children(tmp_path, world):
    out = run(tmp_path, libtorch="cpu", lock=str(world.lock), bin="/opt/train")
    home = Home(tmp_path / "home")
    assert out.variant == "cpu" and out.env.path.parent == home.envs and out.env.created
    assert active_label(home) == "precompiled/cpu"
    assert out.environ["LIBTORCH_PATH"] == str(out.env.libtorch_root) and out.environ["FDL_GPU_FEATURE"] == ""
    assert out.environ["HOOK_MARK"] == f"hooked:{out.env.path}"                  # the env's activate.d ran
    assert out.environ["LD_LIBRARY_PATH"].split(":")[0] == str(out.env.libtorch_root / "lib")
    assert out.bin == "/opt/train" and out.cwd is None and out.args is None
    assert f"libtorch: precompiled/cpu at {out.env.libtorch_root} (realised)" in out.notes
    assert set(out.seconds) == {"data", "dirs", "env", "total"}
    again = run(tmp_path, libtorch="cpu", lock=str(world.lock))
    assert again.env.path == out.env.path and not again.env.created and again.bin is None


def test_auto_routes_through_the_survey(tmp_path, world):
    out = run(tmp_path, survey=lambda: Survey((RTX,), driver_cuda="12.8"), libtorch="auto", lock=str(world.lock))
    assert out.variant == "cu128" and out.environ["FDL_GPU_FEATURE"] == "cuda"
    f = fail_of(run, tmp_path, survey=lambda: Survey((RTX,), driver_cuda="11.8"), libtorch="auto",
                lock=str(world.lock))
    assert not f.transient and "--libtorch auto" in f.message


def test_the_active_variant_is_carried_through_without_a_lock(tmp_path, world):
    home = Home(tmp_path / "home")
    env = realise(home, "cpu", world.lock, activate=True)
    out = run(tmp_path, lock=None)
    assert out.variant == "cpu" and out.env.path == env.path
    assert out.environ["LIBTORCH_PATH"] == str(env.libtorch_root)
    assert not any(n.startswith("libtorch:") for n in out.notes)               # nothing acquired


def test_without_a_variant_nothing_is_settled_and_a_note_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("FDLENV_PREP_MARK", "inherited")
    out = run(tmp_path)
    assert out.variant is None and out.env is None and out.to_json()["env"] is None
    assert out.environ["FDLENV_PREP_MARK"] == "inherited" and any("no libtorch settled" in n for n in out.notes)


def test_the_rocm71_env_is_baked_on_a_box_without_gpus(tmp_path, world, runs):
    src = published_tree(tmp_path, run="c0ffee" * 6)
    out = run(tmp_path, survey=lambda: Survey(), libtorch="rocm7.1", lock=str(world.lock),
              source=SourceSpec(f"file://{src}"))
    assert out.variant == "rocm7.1" and active_label(Home(tmp_path / "home")) == "precompiled/rocm71"
    libtorch, feature, hook = Path(out.bin).read_text().split("|")
    assert libtorch == str(out.env.libtorch_root) and feature == "rocm" and hook == f"hooked:{out.env.path}"
    assert out.run_id == "c0ffee" * 6 and out.args == []
    assert Path(out.cwd).parent == tmp_path / "home" / "source"


# ------------------------------------------------------------------ steps 4 + 6

def test_a_source_is_fetched_built_and_reused_on_a_redial(tmp_path, world, runs):
    src = published_tree(tmp_path, args=("--epochs", "3"), run="feedbeef" * 4, cwd=None)
    req = dict(libtorch="cpu", lock=str(world.lock), source=SourceSpec(f"file://{src}", bin="ignored"))
    out = run(tmp_path, **req)
    assert Path(out.bin).is_file() and Path(out.bin).parent.parent == tmp_path / "home" / "builds"
    assert out.args == ["--epochs", "3"] and out.run_id == "feedbeef" * 4
    assert [n for n in out.notes if n.startswith(("source:", "run manifest:"))] == [
        f"source: copied {src}", "run manifest: run feedbeef… bin target/release/train — NOT built by the controller"]
    assert set(out.seconds) == {"data", "dirs", "source", "env", "build", "total"} and runs() == 1
    again = run(tmp_path, **req)
    assert again.bin == out.bin and runs() == 1                                # nothing changed: no recipe
    (src / "src" / "main.rs").write_text("fn main() { changed() }\n")
    assert run(tmp_path, **req).bin != out.bin and runs() == 2


def test_the_local_recipe_stands_without_a_manifest(tmp_path, world, runs):
    src = write_tree(tmp_path / "src", {"app/main.rs": "x"})
    out = run(tmp_path, libtorch="cpu", lock=str(world.lock),
              source=SourceSpec(f"file://{src}", cwd="app", build=RECIPE, bin="target/release/train"))
    assert out.cwd.endswith("/app") and out.args is None and out.run_id is None and runs() == 1


def test_a_lock_at_the_source_trees_root_is_discovered(tmp_path, world, runs):
    src = published_tree(tmp_path)
    (src / "conda-lock.yml").write_bytes(world.lock.read_bytes())
    out = run(tmp_path, libtorch="cpu", source=SourceSpec(f"file://{src}"))
    assert out.variant == "cpu" and Path(out.bin).is_file()


def test_a_build_without_a_settled_libtorch_says_so(tmp_path, runs, monkeypatch):
    monkeypatch.delenv("LIBTORCH_PATH", raising=False)
    src = published_tree(tmp_path)
    out = run(tmp_path, source=SourceSpec(f"file://{src}"))
    assert out.env is None and Path(out.bin).read_text() == "||"
    assert any("build gets no LIBTORCH_PATH" in n for n in out.notes)


def test_a_failed_build_is_transient_and_keeps_the_notes(tmp_path, world):
    src = write_tree(tmp_path / "src", {"main.rs": "x"})
    f = fail_of(run, tmp_path, libtorch="cpu", lock=str(world.lock),
                source=SourceSpec(f"file://{src}", build="exit 7", bin="target/release/train"))
    assert f.transient and "exit 7" in f.message
    assert any(n.startswith("libtorch: precompiled/cpu") for n in f.notes)


def test_a_build_with_another_rustc_than_the_publishers_gets_a_note(tmp_path, world, runs, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rustc").write_text("#!/bin/sh\necho 'rustc 1.90.0 (local 2025-01-01)'\n")
    (bin_dir / "rustc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    src = published_tree(tmp_path, rustc="rustc 1.85.0 (4d91de4e4 2025-02-17)")
    out = run(tmp_path, libtorch="cpu", lock=str(world.lock), source=SourceSpec(f"file://{src}"))
    assert ("the run was published with rustc 1.85.0 (4d91de4e4 2025-02-17), this box has "
            "rustc 1.90.0 (local 2025-01-01) (advisory)") in out.notes
    again = run(tmp_path, libtorch="cpu", lock=str(world.lock), source=SourceSpec(f"file://{src}"))
    assert runs() == 1 and not any("published with" in n for n in again.notes)   # reused: rustc not asked
    (src / ".fdl-run.yml").write_text(manifest.dump(RunManifest(bin="target/release/train", build=RECIPE,
                                                                rustc="rustc 1.90.0 (local 2025-01-01)")))
    assert not any("published with" in n for n in run(tmp_path, libtorch="cpu", lock=str(world.lock),
                                                       source=SourceSpec(f"file://{src}")).notes)


def test_the_data_source_gets_the_ssh_blocks_identity_and_options(tmp_path, monkeypatch):
    from fdlenv.app import datasets as data

    seen = []
    monkeypatch.setattr(data, "_sshfs", lambda src, mp, options, identity, proc: seen.append((src, mp, options,
                                                                                              identity)))
    out = run(tmp_path, data_path="mnt", data_source="sshfs://nas:2222/srv/corpus",
              ssh=SshConfig("hop", None, "me", "/keys/id", ("Compression=yes",)))
    assert out.data_path == str(tmp_path / "mnt") and out.to_json()["data_path"] == str(tmp_path / "mnt")
    # sshfs's ssh keeps its first-use default where the options set none (join's tunnel reads ~/.ssh/config)
    assert seen == [(data.SshfsSource("nas:/srv/corpus", 2222), tmp_path / "mnt",
                     ["Compression=yes", "StrictHostKeyChecking=accept-new"], "/keys/id")]
    assert f"mounted nas:/srv/corpus read-only at {tmp_path / 'mnt'}" in out.notes


def test_a_mounted_data_source_is_reused_and_shipped(tmp_path):
    (tmp_path / "mnt").mkdir()
    (tmp_path / "no-mounts").write_text(f"nas:/srv {tmp_path / 'mnt'} fuse.sshfs ro 0 0\n")
    out = run(tmp_path, data_path=str(tmp_path / "mnt"), data_source="sshfs://nas/srv")
    assert out.data_path == str(tmp_path / "mnt") and "already mounted from nas:/srv" in out.notes[0]


# ------------------------------------------------------------------ wiring

def test_a_request_carries_every_prepare_field_of_the_settings():
    ssh = SshConfig("hop", 22, "me", "/k", ("Compression=yes",))
    s = JoinSettings(host="h", libtorch=Libtorch("cu128"), lock="/l.yml", mirrors={"flodl": "file:///m"}, bin="/b",
                     devices=(0, 2), data_path="/d", data_source="sshfs://n/x", ssh=ssh, project_root="/p")
    r = request_from_settings(s)
    assert r == PrepareRequest(libtorch=Libtorch("cu128"), lock="/l.yml", mirrors={"flodl": "file:///m"}, bin="/b",
                               devices=(0, 2), data_path="/d", data_source="sshfs://n/x", ssh=ssh,
                               project_root="/p", gpu_gate=True)
    assert request_from_settings(s, gpu_gate=False).gpu_gate is False


def test_join_prepares_with_the_gpu_gate(tmp_path, world, monkeypatch):
    from fdlenv.front.commands.join import real_prepare

    monkeypatch.setenv("HOME", str(tmp_path))
    settings = JoinSettings(host="h", libtorch=Libtorch("cpu"), lock=str(world.lock), bin="/b", home=str(tmp_path / "home"))
    monkeypatch.setenv("FLODL_TESTING_GPU_JSON", "[]")
    assert "no GPUs detected" in fail_of(real_prepare, settings).message
    monkeypatch.setenv("FLODL_TESTING_GPU_JSON", '[{"vendor": "nvidia", "arch": "8.6"}]')
    out = real_prepare(settings)
    assert out.variant == "cpu" and out.env.path.parent == tmp_path / "home" / "envs"


def test_prepared_json_is_exactly_the_documented_shape(tmp_path):
    p = Prepared(variant="cpu", env=Env("cpu", "k", Path("/e"), Path("/e/libtorch")), bin="/b", notes=["n"],
                 seconds={"env": 0.123456}, environ={"SECRET": "not printed"})
    p.label = "precompiled/cpu"
    assert p.to_json() == {"variant": "cpu", "libtorch": "precompiled/cpu", "env": {"key": "k", "path": "/e", "libtorch_root": "/e/libtorch"},
                           "bin": "/b", "cwd": None, "data_path": None, "args": None, "run_id": None,
                           "notes": ["n"], "auto": None, "seconds": {"env": 0.1235}}
