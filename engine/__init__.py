"""The model library both stages import: the model, its inputs and the streaming engine (module by
module: the module map of ``docs/design.md``)."""
