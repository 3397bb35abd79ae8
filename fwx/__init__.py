"""fwx: export PyTorch, TensorFlow and Keras models to every deployment format, prove them, serve them.

Importing this package must stay cheap: it imports neither torch nor TensorFlow
(``tests/test_imports.py`` checks it in a subprocess).
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
