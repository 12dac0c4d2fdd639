"""The book's measured experiments, and the tools that record them and compare their seeds.

- :mod:`vitbook.studies.experiments`, :mod:`vitbook.studies.distill_digits` and
  :mod:`vitbook.studies.transfer_digits`: the experiments on the digits, shipped as recorded files.
- :mod:`vitbook.studies.ladder`: the photo chapter's recipe ladder on CIFAR-10, recorded on a GPU;
  :mod:`vitbook.studies.progress` (what a partial recording holds of its plan) and
  :mod:`vitbook.studies.session` (recording a plan in GPU sessions of any length) and
  :mod:`vitbook.studies.budgets` (how many runs share the GPU, how many sessions are left).
- :mod:`vitbook.studies.records`: the seeds' spread, and results files: appended to one run at a
  time under a lock, and joined only when they belong together.
- :mod:`vitbook.studies.comparison`: paired differences of two settings over their seeds;
  :mod:`vitbook.studies.numerics`: how far two computations of the same numbers may be apart.

See chapter: Training and classification.
"""
