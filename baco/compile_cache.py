"""JAX's persistent compilation cache for baco's runs: a second `baco run` (or a reproduce
worker) loads the programs the first compiled instead of compiling them again.

On by default, in ``$BACO_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/baco/jax``, else
``~/.cache/baco/jax``; ``BACO_JAX_CACHE=0`` (or ``off``) turns it off. A path in
``BACO_JAX_CACHE`` names the folder too (its earlier meaning). A cache folder JAX was already
given (``JAX_COMPILATION_CACHE_DIR``, or ``jax.config``) is left as it is. The cache is code
JAX runs: keep it in a folder only you can write (JAX's "Persistent compilation cache" guide).

>>> folder({"BACO_CACHE_DIR": "/tmp/c"}).as_posix()
'/tmp/c'
>>> folder({"BACO_JAX_CACHE": "off", "BACO_CACHE_DIR": "/tmp/c"}) is None
True
"""

from __future__ import annotations

import os
import pathlib
import sys
import tempfile
from collections.abc import Mapping

__all__ = ["MIN_COMPILE_SECS", "enable", "folder", "user_cache_folder"]

MIN_COMPILE_SECS = 0.5
"""Programs that compile faster are not written (JAX's default is 1 s; the model's smaller
programs take 0.5-1 s each, and a run compiles dozens)."""

_OFF = ("0", "off", "false", "no", "none")
_ON = ("1", "on", "true", "yes")


def user_cache_folder(env: Mapping[str, str], variable: str, name: str,
                      default: str | None = None) -> pathlib.Path | None:
    """The folder of one of baco's caches: None when ``env[variable]`` turns it off (``0``,
    ``off``...); the folder it names; else `default` if given; else ``name`` under
    ``$XDG_CACHE_HOME/baco`` or ``~/.cache/baco``."""
    flag = env.get(variable, "").strip()
    if flag.lower() in _OFF:
        return None
    if flag and flag.lower() not in _ON:
        return pathlib.Path(flag).expanduser()
    if default:
        return pathlib.Path(default).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(base).expanduser() / "baco" / name


def folder(env: Mapping[str, str] = os.environ) -> pathlib.Path | None:
    """The cache folder `env` asks for, None when it turns the cache off."""
    return user_cache_folder(env, "BACO_JAX_CACHE", "jax", env.get("BACO_CACHE_DIR"))


def enable(env: Mapping[str, str] = os.environ) -> pathlib.Path | None:
    """Point JAX's persistent cache at `folder`; the folder in use, or None. A folder JAX
    already has is kept, so calling it again changes nothing. Before JAX is imported it only
    sets JAX's environment variables (the CLI stays cheap; child processes inherit them);
    after, ``jax.config``. A folder that cannot be written leaves the cache off with one
    warning line on stderr, never an error."""
    jax = sys.modules.get("jax")
    current = (jax.config.jax_compilation_cache_dir if jax is not None
               else os.environ.get("JAX_COMPILATION_CACHE_DIR"))
    if current:
        return pathlib.Path(current)
    where = folder(env)
    if where is None:
        return None
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as exc:
        print(f"baco: JAX compilation cache off: cannot write {where} "
              f"({exc.strerror or exc})", file=sys.stderr)
        return None
    if jax is None:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(where)
        os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = str(MIN_COMPILE_SECS)
    else:
        jax.config.update("jax_compilation_cache_dir", str(where))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECS)
    return where
