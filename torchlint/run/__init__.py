"""Running a check or fix over files: discovery, reading and writing, the cache, workers and their guards, notebooks, progress."""
