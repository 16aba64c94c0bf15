"""What the executors that run on a file system share: a run's log file (`logfile`: the bounded
writer and its readers) and its spilled params (`params`). The inline executor writes both; the
Slurm executor reads the log its job writes on the shared file system and spills params the same
way, so both live here rather than one executor importing the other."""
