"""`python -m rmjudge.quantize`: the rmjudge-export command."""

from rmjudge.quantize.cli import main

main()
