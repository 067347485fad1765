"""The GPU and model catalogues: GPU profiles (``profiles/gpus``), model architectures from Hugging Face
``config.json`` files (``profiles/models``), and where ``profiles/`` lives."""
