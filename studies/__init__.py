"""Single studies: one package per study (its scripts, rows and report); see studies/README.md."""
