"""vitbook's benchmarks: model speed, distance to the machine's matmul limit, memory, book budget.

Run them all with ``python3 tasks.py bench`` or ``python benchmarks/run.py``; see
``benchmarks/README.md``. Each section is a module with a ``run(quick=...)`` function that
returns :class:`benchmarks.common.Table` objects; ``benchmarks/run.py`` prints them and writes them
as JSON.
"""
