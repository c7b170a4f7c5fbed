"""baco: differentiable co-design of DNN accelerators and their programs.

The public API is loaded lazily, so that ``import baco.errors`` or the CLI stay cheap and the
packages below ``baco`` never pull in the search code.

>>> import baco
>>> baco.load_network("resnet50").unique_layers
24

``baco.codesign(network, template="gemmini", config=baco.CodesignConfig(...))`` co-designs an
accelerator and every layer's program (a `baco.CodesignResult`); ``baco.run_experiment(path)``
runs a config file's co-design and baselines (`baco run`).
"""

import importlib

_EXPORTS = {
    "CodesignConfig": ("baco.config", "CodesignConfig"),
    "CodesignResult": ("baco.result", "CodesignResult"),
    "ExperimentConfig": ("baco.config", "ExperimentConfig"),
    "codesign": ("baco.codesign", None),        # a callable module: baco.codesign(network, ...)
    "errors": ("baco.errors", None),
    "load_network": ("baco.networks", "load_network"),
    "run_experiment": ("baco.run", "run_experiment"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    try:
        module_name, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'baco' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__():
    return __all__
