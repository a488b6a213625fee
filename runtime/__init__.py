"""Runtime pieces used by the harness (never imported by the linter).

Importing this package imports torch, nothing heavier.
"""

from .adamw import AdamW
from .reference import ReferenceAdamW

__all__ = ["AdamW", "ReferenceAdamW"]
