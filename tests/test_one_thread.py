"""vitbook.studies.provenance.one_thread: the block's settings are put back as they were."""

from __future__ import annotations

import torch

from vitbook.studies.provenance import one_thread


def test_one_thread_puts_back_the_threads_and_both_deterministic_settings():
    threads = torch.get_num_threads()
    saved = (torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled())  # fmt: skip
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        with one_thread():
            assert torch.get_num_threads() == 1
            assert torch.are_deterministic_algorithms_enabled()
            assert not torch.is_deterministic_algorithms_warn_only_enabled()  # errors, not warnings
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.get_num_threads() == threads
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
