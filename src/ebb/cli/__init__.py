"""The ``ebb`` command: one module per subcommand, each reading its flags, calling the package that owns
the work and printing (exit codes included); nothing here decides, parses a domain format or simulates."""
