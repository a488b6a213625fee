"""torchlint: find and fix slow PyTorch training code.

The linter never imports torch; only ``torchlint.runtime`` does.
"""

import os as _os

__version__ = "0.2.0"

# In a source checkout, rules/, runtime/ and fixtures/ sit beside this folder, and pyproject.toml maps them
# into the package when it is installed. Map them here too, so `python -m torchlint` and the tests work
# from the checkout whatever is installed. (An installed copy has rules/ inside the package: no-op.)
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_checkout, "rules", "__init__.py")) and not _os.path.isdir(
    _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "rules")
):
    __path__.append(_checkout)  # type: ignore[name-defined]  # noqa: F821
