"""A stand-in for a flodl training binary, run as the agent by join tests.

argv: OUTDIR CODE [MODE] [ARGS...]
- probe mode (FLODL_INTERNAL_MODEL_SIG_PROBE=1): print a signature line, exit 0.
- otherwise: record argv and environ to OUTDIR/agent.json, start a grandchild
  (standing for a rank child) that records its environ to OUTDIR/rank.json,
  then per MODE:
    exit  - wait for the grandchild, exit CODE
    dial  - also connect to the controller named by the spec, send a line,
            record the reply in OUTDIR/dial.txt, exit CODE
    hang  - write pids, keep the grandchild sleeping, sleep until signalled
"""

import json
import os
import socket
import subprocess
import sys
import time

SIG = "5a" * 32

if os.environ.get("FLODL_INTERNAL_MODEL_SIG_PROBE") == "1":
    print("probe noise")
    print(f"flodl-model-sig: {SIG}")
    sys.exit(0)

out, code = sys.argv[1], int(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "exit"
os.makedirs(out, exist_ok=True)
n = len([f for f in os.listdir(out) if f.startswith("agent")])
with open(os.path.join(out, f"agent{n}.json"), "w") as f:
    json.dump({"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(),
               "pid": os.getpid(), "pgid": os.getpgid(0)}, f)
rank = (
    "import json,os,sys,time\n"
    f"json.dump(dict(os.environ), open({os.path.join(out, f'rank{n}.json')!r}, 'w'))\n"
    f"open({os.path.join(out, 'rank.pid')!r}, 'w').write(str(os.getpid()))\n"
    "time.sleep(float(sys.argv[1]))\n")
child = subprocess.Popen([sys.executable, "-c", rank, "600" if mode == "hang" else "0"])
if mode == "dial":
    spec = json.loads(bytes.fromhex(os.environ["FLODL_INTERNAL_AGENT_JSON"]))
    with socket.create_connection((spec["controller_host"], spec["controller_port"]), 10) as s:
        s.sendall(f"hello from {spec['host']}\n".encode())
        s.shutdown(socket.SHUT_WR)
        buf = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            buf += d
    with open(os.path.join(out, "dial.txt"), "wb") as f:
        f.write(buf)
if mode == "hang":
    while not os.path.exists(os.path.join(out, "rank.pid")):
        time.sleep(0.01)
    with open(os.path.join(out, "agent.pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
child.wait()
sys.exit(code)
