"""``python -m anyswe`` runs the command line."""

from anyswe.cli import main

main()
