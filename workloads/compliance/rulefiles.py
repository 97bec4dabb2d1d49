"""Where our compliance rule files are: the rules every training benchmark is checked against
(COMMON) and the closed-division rule file each built-in benchmark entry names
(runner/job/benchmarks.py, `ruleset`), as a plugin's benchmark names a file in its own
folder. Kept apart from the checker (__init__.py), which reads the benchmark registry: the
entries import this, not the checker. Standard library only.
"""

from __future__ import annotations

from pathlib import Path

RULES_DIR = Path(__file__).parent
COMMON = "common.yaml"
CLASSIFICATION = RULES_DIR / "classification.yaml"
TRANSFORMER_WMT17 = RULES_DIR / "transformer-wmt17.yaml"
GNMT_WMT16 = RULES_DIR / "gnmt-wmt16.yaml"
LSTM_WIKITEXT2 = RULES_DIR / "lstm-wikitext2.yaml"
