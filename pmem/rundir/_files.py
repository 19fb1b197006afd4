"""Files of the run directory besides the datasets: the text logs a sweep leaves.

They live under ``logs/`` because ``pmem erase`` scrubs every text file there (a progress note may name a
history, a failure may quote a model's reply).
"""

from __future__ import annotations

#: text logs of a run, relative to the run directory: each hosted replica's server log
#: (``<role>-replica-<i>.log``) and the sweep's progress log
LOGS = "logs"

#: the sweep's progress log, relative to the run directory: every ``progress_s`` a timestamped snapshot
#: (the full progress line and the histories done per subset and arm), and every note of the driver,
#: the details ``pmem sweep --verbose`` prints included; each invocation appends to it
PROGRESS_LOG = f"{LOGS}/sweep-progress.log"
