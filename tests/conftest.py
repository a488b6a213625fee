import sys
from pathlib import Path

# Lets test modules import their shared helpers (fixture_support) without making tests a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
