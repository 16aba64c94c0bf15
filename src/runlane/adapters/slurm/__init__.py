"""The Slurm executor (`executor: slurm`): runs as batch jobs on a Slurm cluster."""
