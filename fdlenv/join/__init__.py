"""The dial-in runner: tunnel, agent spec, signature probe, attempt loop.

One attempt is prepare -> binary and cwd -> signature probe -> tunnel -> spec
-> spawn -> wait -> teardown (as flodl's `fdl join` does); `loop.run_join` repeats it
under `--persist`. Nothing here imports paramiko at module level.
"""
