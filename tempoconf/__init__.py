"""tempoconf: staged configuration rollouts on Temporal.

This package is the domain shared by every component (workflows, activities, API, CLI).
It never imports from them.
"""

__version__ = "0.1.0"
