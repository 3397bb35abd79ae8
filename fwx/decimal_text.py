"""One test for "a decimal number" in text fwx reads from users, files and requests.

``str.isdigit()`` is true for superscripts (``'¹'``) and other scripts' digits
(``'٣'``); ``int()`` refuses the first, so a request path or header holding one
reached ``int()`` and answered 500 (found by the schemathesis run). Every
place that checks text before ``int()`` asks this instead.
"""

from __future__ import annotations


def is_digits(text: str) -> bool:
    """True for one or more ASCII ``0-9`` and nothing else."""
    return text.isascii() and text.isdigit()
