"""Which door of the sandbox (harness/sandbox.py) stops CUDA: each piece alone, in a child that
then starts CUDA. `python tuning/sandbox_cuda_probe.py [PIECE ...]`; results (H200,
2026-12-02) in tuning/results/sandbox_cuda_probe_h200.txt.

Pieces: none, net (network namespace), files (the launcher's Landlock rules, nothing hidden),
caps, data (RLIMIT_DATA), nproc; and Landlock variants with READ on / and the devices on
/dev: v3 and v5 (older ABIs), all (WRITE everywhere too), and w_proc, w_tmp, w_sys, w_dev,
w_self (WRITE added under /proc, /tmp, /sys, /dev, or the process's own /proc/<pid>).
"""

import subprocess
import sys
from pathlib import Path

REPO = str(Path(__file__).resolve().parent.parent)
CHILD = """
import ctypes, os, resource, sys
sys.path.insert(0, REPO)
from pathlib import Path
from harness import landlock, sandbox
piece = PIECE
libc = ctypes.CDLL(None, use_errno=True)
scratch = Path("/tmp/sbx-probe")
scratch.mkdir(exist_ok=True)
extra = {"w_proc": "/proc", "w_tmp": "/tmp", "w_sys": "/sys", "w_dev": "/dev",
         "w_self": f"/proc/{os.getpid()}", "all": "/"}
if piece == "net":
    sandbox.unshare_network(libc)
elif piece == "files":
    sandbox.restrict_files(sandbox.Policy(()), scratch)
elif piece == "caps":
    sandbox.drop_capabilities(libc)
elif piece == "data":
    sandbox._lower(resource.RLIMIT_DATA, 16 << 30)
elif piece == "nproc":
    sandbox._lower(resource.RLIMIT_NPROC, sandbox.user_tasks(os.getuid()) + 1024)
elif piece != "none":
    rules = landlock.Ruleset({"v3": 3, "v5": 5}.get(piece, landlock.abi()))
    rules.allow(Path("/"), landlock.READ)
    rules.allow(scratch, landlock.READ | landlock.WRITE)
    rules.allow(Path("/dev"), landlock.READ | landlock.DEVICE)
    if piece in extra:
        rules.allow(Path(extra[piece]), landlock.READ | landlock.WRITE | landlock.DEVICE)
    rules.apply()
import torch
print(piece, torch.cuda.device_count(), torch.zeros(1, device="cuda").item())
"""

if __name__ == "__main__":
    pieces = sys.argv[1:] or ["none", "net", "files", "caps", "data", "nproc"]
    for piece in pieces:
        code = CHILD.replace("REPO", repr(REPO)).replace("PIECE", repr(piece))
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        last = (done.stdout + done.stderr).strip().splitlines()[-1:]
        print(piece, "rc", done.returncode, last)
