"""Write the AutoResearch tasks as verl parquet files (train: training tasks; test: held-out).

    .venv-verl/bin/python examples/verl/make_data.py --out data/wmrl_autoresearch [--mode line]

See ``examples/verl/wmrl_autoresearch.yaml`` and ``docs/verl.md``.
"""

from __future__ import annotations

import argparse

from agents.adapters.verl import write_autoresearch_dataset

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="data/wmrl_autoresearch", help="output folder")
    p.add_argument("--mode", default="script", choices=["script", "line"],
                   help="the completion is a whole script, or its `model = ...` line")
    p.add_argument("--repeat", type=int, default=16,
                   help="rows per training task (at least data.train_batch_size rows in all)")
    a = p.parse_args()
    for split, path in write_autoresearch_dataset(a.out, mode=a.mode, repeat=a.repeat).items():
        print(f"{split}: {path}")
