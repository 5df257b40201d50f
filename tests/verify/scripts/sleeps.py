"""Hangs forever (a stuck data loader) after starting a helper process, which must die
with it when verify's timeout kills the process group. argv[1]: where to write the
helper's pid."""
import subprocess
import sys
import time

helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
with open(sys.argv[1], "w") as fh:
    fh.write(str(helper.pid))
while True:
    time.sleep(1)
