"""`python -m quantize`: the rmjudge-export command."""

from quantize.cli import main

main()
