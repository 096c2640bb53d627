"""Shared test setup: the one tiny config and a model built from it (seconds on 2 CPU cores), one torch thread per
test process, and the hypothesis profile."""

from __future__ import annotations

import copy
import gc
import os


# Imports that create a few million long-lived objects (torch, transformers) and no garbage: without collections
# while they run (each would scan the growing heap again), then frozen (see pytest_collection_finish).
gc.disable()
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

from higgs_v3 import HiggsAudioV3Config, HiggsAudioV3ForConditionalGeneration  # noqa: E402

from higgs_v3.testing import tiny


gc.freeze()
gc.enable()


# Reproducible property tests: the same examples on every run and machine (no example database, no time limit per
# example on a loaded 2-core machine), and a failing example printed as a blob `@reproduce_failure` can replay.
# `HYPOTHESIS_PROFILE=explore` draws fresh random examples instead.
settings.register_profile("repro", derandomize=True, deadline=None, print_blob=True, database=None)
settings.register_profile("explore", deadline=None, print_blob=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repro"))


def pytest_collection_finish(session):
    """Everything imported so far (torch, transformers, sympy, the test modules: millions of long-lived objects) moves
    to the garbage collector's permanent generation (`gc.freeze`, also right after this module's imports), so its full
    collections scan only what the tests create: unfrozen, 16 of them scanned the whole heap in the unit layer, 3 s of
    its run. The tests' own objects are collected as before."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config):
    """The tests' last cyclic garbage is collected while pytest's unraisable-exception hook still reports what its
    finalizers raise (its own collection, which runs next, then finds nothing to do); then the heap is frozen, so the
    interpreter's shutdown does not scan it again (1 to 2 s)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """One torch thread in the test process: tiny models gain nothing from a second one, and on a shared 2-core
    machine OpenMP's waiting threads make them several times slower (test_codec.py: 13 s wall with 2 threads under
    load, 4 s with 1). Subprocesses keep their own default."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_config(**overrides) -> HiggsAudioV3Config:
    """The project's one tiny config (`tiny.tiny_config`: 2 layers, the real vocabulary and audio constants)
    with eager attention and no codec unless `codec_config` is given."""
    overrides.setdefault("attn_implementation", "eager")
    return tiny.tiny_config(with_codec=False, **overrides)


_BUILT: dict[tuple[int, str], tuple[HiggsAudioV3ForConditionalGeneration, torch.Tensor]] = {}


def tiny_model(seed: int = 0, **overrides) -> HiggsAudioV3ForConditionalGeneration:
    """A fresh tiny model: `torch.manual_seed(seed)`, then built from `tiny_config(**overrides)`, in eval mode.

    Each (seed, overrides) is built once per run (the 151936-row embedding's two random initialisations are most of a
    build's 0.15 s); later calls get a deep copy of it, and torch's global RNG is left where that build left it, as
    if they had built it again."""
    # The default init (std 0.02) gives near-uniform audio logits and a model that repeats its last row; std 0.3
    # gives varied greedy paths with well separated maxima, so exact comparisons are meaningful.
    overrides.setdefault("initializer_range", 0.3)
    key = (seed, repr(sorted(overrides.items())))
    if key not in _BUILT:
        torch.manual_seed(seed)
        model = HiggsAudioV3ForConditionalGeneration(tiny_config(**overrides)).eval()
        _BUILT[key] = (model, torch.get_rng_state())
    model, rng_state = _BUILT[key]
    torch.set_rng_state(rng_state)
    return copy.deepcopy(model)


def tiny_tts_model(max_new_tokens: int) -> HiggsAudioV3ForConditionalGeneration:
    """`tiny_model` with the tiny codec (codebooks randomized with seed 0, so codes vary) and a generation config that
    stops after `max_new_tokens` rows. `use_cache` is set: transformers 5.5's text-to-audio pipeline copies the
    generation config into the model config, whose strict `use_cache: bool` refuses None."""
    model = tiny_model(codec_config=tiny.tiny_codec_config())
    torch.manual_seed(0)
    tiny.randomize_codebooks(model.codec)
    model.generation_config.max_new_tokens = max_new_tokens
    model.generation_config.use_cache = True
    return model


@pytest.fixture
def restore_global_state():
    """The benchmark scripts set torch's thread count and silence loggers for the process (`_harness.setup`): undone
    after the test, for the tests that run after it on this worker."""
    import logging

    threads = torch.get_num_threads()
    levels = {name: logging.getLogger(name).level for name in ("higgs_v3", "transformers")}
    yield
    torch.set_num_threads(threads)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture(scope="module")
def model() -> HiggsAudioV3ForConditionalGeneration:
    return tiny_model()


@pytest.fixture(scope="session")
def tiny_original(tmp_path_factory):
    """The tiny original-format checkpoint (`write_tiny_original_checkpoint`, defaults), written once per run, in a
    folder named like the real repo. Shared: read it, or copy it before changing anything."""
    return tiny.write_tiny_original_checkpoint(tmp_path_factory.mktemp("orig") / "higgs-audio-v3-tts-4b")


@pytest.fixture(scope="session")
def tiny_random_repo(tmp_path_factory):
    """The tiny random model in the converted layout (`make_tiny_random_model`, seed 0, codec included), written once
    per run. Shared: read it, or copy it before changing anything."""
    return tiny.make_tiny_random_model(tmp_path_factory.mktemp("random") / "random")


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    """A folder with the tiny tokenizer's two files, as `tiny.write_tiny_tokenizer` writes them."""
    return tiny.write_tiny_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def tokenizer():
    """The tiny tokenizer (the real added tokens, in the real order), for tests that build prompts: loaded once per
    process (`tiny.loaded_tiny_tokenizer`, which `make_tiny_random_model` uses too) and shared. Loading it
    reads its 151643-entry vocabulary three times (0.3 s); tests must not change it (the processor's
    `padding_side = "left"` is the one setting made on it, the same by every processor)."""
    return tiny.loaded_tiny_tokenizer()


@pytest.fixture(scope="module")
def processor(tokenizer):
    """A processor over the tiny tokenizer with the real audio constants (test modules may define their own)."""
    from higgs_v3 import HiggsAudioV3Processor

    return HiggsAudioV3Processor(tokenizer)


@pytest.fixture(scope="session")
def second_import():
    """This package imported a second time under another name, as `trust_remote_code=True` imports a repo's copy of
    these modules (`transformers_modules.<repo>...`): the same classes, but distinct ones, in one process, as in a
    user's notebook. Returns `module(name)`, e.g. `second_import("audio_io_higgs_v3").HiggsAudioV3Voice`."""
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    import higgs_v3

    name = "higgs_v3_second_import"
    root = Path(higgs_v3.__file__).parent
    spec = importlib.util.spec_from_file_location(name, root / "__init__.py", submodule_search_locations=[str(root)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    yield lambda module: importlib.import_module(f"{name}.{module}")
    for key in [key for key in sys.modules if key == name or key.startswith(name + ".")]:
        del sys.modules[key]


@pytest.fixture(scope="session")
def transformers_tokenizer_class():
    """transformers' own `HiggsAudioV2TokenizerModel` (the codec class the official server wraps). Its module imports
    torchaudio, which has no build for current torch, so it is imported with a stand-in `torchaudio` whose
    `functional.resample` is `codec_higgs_v3.resample_audio` (torchaudio's algorithm; tests/test_resample.py checks it
    against torchaudio's own outputs): everything else is transformers' code. The stand-in is removed afterwards."""
    import importlib
    import importlib.machinery
    import sys
    import types

    from higgs_v3.codec_higgs_v3 import resample_audio

    module_name = "transformers.models.higgs_audio_v2_tokenizer.modeling_higgs_audio_v2_tokenizer"
    saved = {name: sys.modules.get(name) for name in ("torchaudio", module_name)}
    stub = types.ModuleType("torchaudio")
    stub.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
    stub.functional = types.SimpleNamespace(resample=resample_audio)
    sys.modules["torchaudio"] = stub
    sys.modules.pop(module_name, None)
    yield importlib.import_module(module_name).HiggsAudioV2TokenizerModel
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module
