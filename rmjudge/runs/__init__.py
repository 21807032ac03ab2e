"""A run: the one set-up (`setup.py`), the pipeline of one process, the dry run,
shard merges, the Ray runner and the output guards of `rmjudge-train` and
`rmjudge-export`."""
