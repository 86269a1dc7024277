"""The mixture-of-experts architectures (Qwen3-MoE, OLMoE, Mixtral, gpt-oss) in miniature: every
test of `test_architectures.py` (the head identities, cached generation, the ablation mechanics
and a quick run), on these four."""

from __future__ import annotations

import pytest

from tests.integration.test_architectures import *  # noqa: F403  (the tests and fixtures)
from tests.integration.test_architectures import MOE, pytest_generate_tests  # noqa: F401

pytestmark = pytest.mark.slow
ARCHS = MOE
