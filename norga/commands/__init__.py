"""The commands: ``norga`` (:mod:`norga.commands.cli`), ``norga data``, ``norga doctor`` and the checks every command
runs first (environment, config paths), how a command fails (:mod:`norga.commands.guard`), and the generated config
reference. Importing this package imports nothing; each module imports nothing heavy at module level."""
