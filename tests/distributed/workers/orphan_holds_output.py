"""Leaves a process behind in a session of its own that holds the output pipe open and
never exits, as a hung torchrun worker does (torchrun starts each worker with
start_new_session), then exits; writes that process's pid to argv[1]."""
import os
import subprocess
import sys

if int(os.environ.get("RANK", "0")) == 0:
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                              start_new_session=True)  # inherits stdout: the pipe
    with open(sys.argv[1], "w") as f:
        f.write(str(orphan.pid))
print("worker done", flush=True)
