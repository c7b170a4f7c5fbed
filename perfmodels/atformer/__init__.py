"""perfmodels.atformer: the ATFormer surrogate (Flax) and the hybrid analytical+learned model.

`features` turns a (layer, mapping, hardware) point into tokens; `model` is the network;
`train` fits it to measured cycles (as a residual over the analytical model) and saves it;
`hybrid` uses it differentiably as ``analytic cycles x exp(residual)``; `metrics` measures
fidelity; `transfer` pre-trains on simulator labels and fine-tunes on a few RTL rows.
Simulator labels arrive only as a dataset file (`baco dataset generate`), never as an import.
"""

from perfmodels.atformer.features import Tokens, tokens, tokens_of
from perfmodels.atformer.hybrid import Hybrid, load_hybrid
from perfmodels.atformer.metrics import fidelity
from perfmodels.atformer.model import ATFormer, ModelConfig
from perfmodels.atformer.train import (
    Dataset,
    Stats,
    Surrogate,
    TrainConfig,
    init_params,
    layer_key,
    load,
    read_dataset,
    save,
    split_by_group,
)
from perfmodels.atformer.train import train as train_surrogate

__all__ = [
    "ATFormer",
    "Dataset",
    "Hybrid",
    "ModelConfig",
    "Stats",
    "Surrogate",
    "Tokens",
    "TrainConfig",
    "fidelity",
    "init_params",
    "layer_key",
    "load",
    "load_hybrid",
    "read_dataset",
    "save",
    "split_by_group",
    "tokens",
    "tokens_of",
    "train_surrogate",
]
