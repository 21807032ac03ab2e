"""Shared values and small services every other layer uses: typed errors, settings,
request and result types, seeds, JSON text, SQL quoting, the count names, Ctrl-C
handling, the ~/.cache tables, missing extras. Imports nothing else of rmjudge."""
