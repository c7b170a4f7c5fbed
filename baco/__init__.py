"""baco: differentiable co-design of DNN accelerators and their programs.

The public API is loaded lazily, so that ``import baco.errors`` or the CLI stay cheap and the
packages below ``baco`` never pull in the search code.

>>> import baco
>>> baco.load_network("resnet50").unique_layers
24

``baco.codesign(network, template="gemmini", config=baco.CodesignConfig(...))`` co-designs an
accelerator and every layer's program (a `baco.CodesignResult`); ``baco.run_experiment(path)``
runs a config file's co-design and baselines (`baco run`). ``baco.judge(result)`` scores
any search's design on the three yardsticks `baco run` reports (plain model, instruction-aware
model, simulator; `baco.final_pick.judge_result`, a `baco.yardsticks.Yardsticks`).
``baco.enable_compile_cache()`` turns on JAX's persistent compilation cache
(`baco.compile_cache.enable`), as `baco run` does, so that a second session loads the compiled
model instead of compiling it again; ``baco.enable_sim_cache()`` keeps every simulated layer in
the user's cache folder (`baco.sim_cache.enable_store`), so a later run reuses it.
``@baco.jit`` and the block-DSL primitives (``baco.load``, ``baco.dot``...) come from
`baco.dsl`.
"""

import importlib

_EXPORTS = {
    "CodesignConfig": ("baco.config", "CodesignConfig"),
    "CodesignResult": ("baco.result", "CodesignResult"),
    "ExperimentConfig": ("baco.config", "ExperimentConfig"),
    "codesign": ("baco.codesign_loop", "codesign"),
    "enable_compile_cache": ("baco.compile_cache", "enable"),
    "enable_sim_cache": ("baco.sim_cache", "enable_store"),
    "errors": ("baco.errors", None),
    "judge": ("baco.final_pick", "judge_result"),
    "load_network": ("baco.networks", "load_network"),
    "run_experiment": ("baco.run", "run_experiment"),
    # The block DSL (baco.dsl): @baco.jit kernels and their primitives.
    "dsl": ("baco.dsl", None),
    "jit": ("baco.dsl", "jit"),
    "autotune": ("baco.dsl", "autotune"),
    "Config": ("baco.dsl", "Config"),
    "const": ("baco.dsl", "const"),
    "program_id": ("baco.dsl", "program_id"),
    "num_programs": ("baco.dsl", "num_programs"),
    "arange": ("baco.dsl", "arange"),
    "zeros": ("baco.dsl", "zeros"),
    "full": ("baco.dsl", "full"),
    "load": ("baco.dsl", "load"),
    "store": ("baco.dsl", "store"),
    "dot": ("baco.dsl", "dot"),
    "cdiv": ("baco.dsl", "cdiv"),
    "where": ("baco.dsl", "where"),
    "maximum": ("baco.dsl", "maximum"),
    "gelu": ("baco.dsl", "gelu"),
    "softmax": ("baco.dsl", "softmax"),
    "minimum": ("baco.dsl", "minimum"),
    "make_block_ptr": ("baco.dsl", "make_block_ptr"),
    "advance": ("baco.dsl", "advance"),
    "int1": ("baco.dsl", "int1"),
    "int8": ("baco.dsl", "int8"),
    "int32": ("baco.dsl", "int32"),
    "float32": ("baco.dsl", "float32"),
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
