"""The model library both stages import: model assembly (``model``), the turn renderer
(``render``), the streaming engine (``streaming``, ``kv_cache``, ``attention``, ``image_merge``,
``naive``), checkpoint loading (``checkpoints``), probe branches (``probes``) and long-horizon
memory (``memory/``)."""
