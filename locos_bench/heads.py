"""Old import path of `locos_bench.models.heads`, kept for users' code: the same module object."""

import sys

from locos_bench.models import heads as _heads

sys.modules[__name__] = _heads
