from rmjudge.cli import main

main()
