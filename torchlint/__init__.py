"""torchlint: find and fix slow PyTorch training code.

The linter never imports torch; only ``torchlint.runtime`` does.
"""

__version__ = "0.1.0"
