"""Small numerical checks of theory papers behind norga (not used by the training pipeline)."""
