"""The reliability battery: attack running workers the way deployments do, count what was lost.

`python -m tests.chaos --profile short|long` runs each scenario against real `runworker`
processes and real Redis servers, then prints one row per scenario: jobs, faults injected, lost,
duplicated, recovery time (p50/max) and pass/fail. It exits non-zero if any scenario failed.

The evidence is a log the jobs write themselves (`testproject.probes.jobs.Chaos`): one file per
process, one O_APPEND write per line, a "start" line before the work and a "done" line after it,
so it survives `kill -9`. The checker (`checker.py`) compares it with what enqueue accepted:

- lost: accepted, but never done (or not completed in Redis);
- duplicated: done more than once; each duplicate must trace back to an injected fault, and
  there may be no more of them than the faults could cause;
- unexpected: done, but never accepted (nor attempted by an enqueue that raised).
"""
