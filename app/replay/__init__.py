"""The embedded runner: the core folds driven in one process, no broker needed."""
