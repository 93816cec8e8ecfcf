"""Generic infrastructure every layer shares (config schemas, safe files and locks, progress); it
imports no other package of the project. Module by module: the module map of ``docs/design.md``."""
