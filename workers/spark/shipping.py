"""Shipping code to Spark's executors by value: the batch partition function and the
user's project modules travel with each job (cloudpickle), so executors need not import
them; installed distributions and taskq itself are imported there as usual."""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable
from typing import Any

from taskq.workers.spark import items as spark_items

# Packages never shipped by value: the executors import these (or do not need them).
NOT_SHIPPED = frozenset({"__main__", "taskq", "workers", "dlq", "pyspark", "py4j"})


class Shipper:
    """What one worker process has registered to be pickled by value."""

    def __init__(self) -> None:
        self._shipped: set[str] = set()
        self._scanned: dict[str, int] = {}  # package -> size of sys.modules when scanned

    def ship(self, fn: Callable[..., Any]) -> None:
        """Make `fn`'s package picklable by value, so executors need not import it.

        Every loaded module of the function's top-level package that is not an installed
        distribution goes by value (its functions and classes travel with the job).
        """
        if spark_items.__name__ not in self._shipped:  # the partition function of batches
            self._ship_module(spark_items)
        module = getattr(fn, "__module__", None) or "__main__"
        top = module.partition(".")[0]
        if top in NOT_SHIPPED or self._scanned.get(top) == len(sys.modules):
            return  # __main__ is pickled by value anyway; nothing new imported since
        self._scanned[top] = len(sys.modules)
        for name, mod in list(sys.modules.items()):
            if (name == top or name.startswith(top + ".")) and name not in self._shipped:
                if _is_project_code(mod):
                    self._ship_module(mod)
                self._shipped.add(name)

    def _ship_module(self, module: Any) -> None:
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)
        self._shipped.add(module.__name__)


def _is_project_code(module: Any) -> bool:
    """A module loaded from a source tree, not from site-packages or the standard library."""
    path = getattr(module, "__file__", None)
    if not path:
        return False
    path = os.path.realpath(path)
    installed = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib")}
    return not any(path.startswith(os.path.realpath(p) + os.sep) for p in installed)
