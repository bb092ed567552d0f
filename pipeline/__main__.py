"""`python -m loopmeter` is the `loopmeter` command."""
from loopmeter.entry import main

main()
