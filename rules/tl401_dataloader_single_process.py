"""TL401: a training DataLoader that loads every batch in the main process."""

from __future__ import annotations

from torchlint.config import Settings
from torchlint.facts.loaders import ABSENT, built_elsewhere, loader_facts
from torchlint.rule import FixAvailability, IndexContext, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, may_train


class DataloaderSingleProcess(Rule):
    """## What it does
    Flags a `torch.utils.data.DataLoader(...)` without `num_workers`, or with `num_workers=0`, that a
    training loop of the same file iterates: a loop that calls `backward()` or steps an optimizer (itself or
    through a function of the file, such as `train_step(batch)`), over the loader's name, through
    `enumerate`/`tqdm` (also `with tqdm(loader) as bar:`), an alias (`active = train_loader`), a function of the
    file that takes the loader as a parameter, or batches drawn with `next()` (or the iterator's `.next()`,
    `.__next__()`) from `iter(loader)` or from a generator of the file that yields from the loader
    (`def cycle(dl): while True: yield from dl`). The loader may be built by a factory function of the file
    (`def build_loader(...): return DataLoader(...)`), or by a method of a class of the file on an instance
    bound only to that class (`dm.train_dataloader()` with `dm = DataModule(...)`, a
    Lightning `LightningDataModule`'s shape, inherited methods included), reported at its `DataLoader(...)`,
    or by a factory of another file of the checked project (`from data import build_loader`, also one a star
    import of a project module binds: `from utils import *`, by its `__all__` or its public names): that finding
    is reported at the factory's call in the training file, names where the loader is built, and has no fix.
    A loader that another project file builds (itself, or by a factory) and hands to a class or module-level
    function of the training file (`Solver(config, train_loader)` in `main.py`, `self.train_loader =
    train_loader` in `Solver.__init__`) is reported at the parameter that receives it, naming where it is
    built and which call hands it over, without a fix; a parameter the receiver rebinds is not followed. A
    name the handing file binds to several loaders is followed where they are all built with the same
    settings (the first build is named), and left alone otherwise.

    Silent where the rule cannot see the value or the use:
    - `DataLoader(ds, **loader_kwargs)` and `*args`: the workers may well be set there;
    - `num_workers=args.workers`, `cfg.num_workers` or any name not bound to `0` in the file;
    - a `TensorDataset`, or a Python list or tuple of samples (a display or a comprehension, also a name every
      binding of which is one: `pairs = [(img, label) for img, label in cifar10 if label < 2]`): indexing
      samples already in memory is cheaper than shipping them between processes
      (also a name bound to one in the loader's own branch, `else: ds = TensorDataset(...)`, when the
      name has other bindings elsewhere), or an instance of a class of the file that cuts pieces of a
      tensor it holds the same way: its `__getitem__` only assigns and returns slices of `self.<attr>`,
      arithmetic, `len`/`min`/`max`, a random offset (`torch.randint`) and shaping or converting tensor
      methods, and a slice of `self.<attr>` goes through a method only tensors have (`.long()`,
      `.clone()`), so what it cuts is a tensor in memory (a NumPy memory map or an HDF5 dataset, read from
      disk when indexed, has no such method, and is still reported);
    - a dataset whose samples are made on the GPU: the loader's dataset is, or may be (one binding of its
      name, the argument of a wrapper such as `Subset(ds, ids)`), an instance of a class of the file whose
      `__getitem__` (`__getitems__`, `__iter__`), or a method of its class that one calls, moves a tensor to
      a device that is CUDA or may be, or makes one there (`x.cuda()`, `x.to(device)`,
      `torch.tensor(..., device="cuda")`). Worker processes cannot do that: CUDA does not survive a fork,
      and spawned workers each start a CUDA context of their own and hand CUDA tensors back through
      inter-process memory, which PyTorch advises against. Such a loader moves nothing between host and
      device per batch in the training loop, so there is little for workers to overlap;
    - loaders no training loop of the file iterates: validation and test loaders, the examples in a
      `Dataset` module's docstring or `__main__` block, a loader only peeked at once
      (`next(iter(loader))`) before its name is rebound to the loader that trains: where a plain assignment
      in the same body rebinds the name (`loader = DataLoader(a)` ... `loader = DataLoader(b)` ...
      `train(loader)`), a use is tied only to the loader the last earlier one gives (a rebinding under an
      `if` or in a loop ties it to both). (A single-process validation loader slows the
      epoch too, but the evaluation loop is often short and memory-bound; this rule keeps to the loop that
      sets the pace of training.)
    - loaders built here and handed to another module, or built in another module in a way the project
      model does not follow (a module-level loader imported by name, a method of a class): the rule prefers
      silence to a guess;
    - tests (pytest files, `tests/` folders).

    ## Why is this slow?
    With `num_workers=0` the main process loads, decodes, augments and collates every batch itself, between
    training steps: the GPU waits for each batch to be made. Worker processes prepare the next batches
    while the current one trains (`prefetch_factor` batches each, 2 by default). For image pipelines that
    decode and augment on the CPU this commonly halves the epoch time or better.

    ## Example
    ```python
    train_loader = DataLoader(train_set, batch_size=256, shuffle=True)

    for epoch in range(epochs):
        for images, labels in train_loader:
            loss = criterion(model(images.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
    ```

    ## Use instead
    ```python
    import os

    def main():
        train_loader = DataLoader(train_set, batch_size=256, shuffle=True,
                                  num_workers=min(8, os.cpu_count() or 1))
        ...

    if __name__ == "__main__":  # needed where workers are spawned (Windows, macOS)
        main()
    ```
    A starting value is `min(8, os.cpu_count())`: raise it while the GPU still waits for data, lower it
    when the machine runs out of memory or CPU (each worker holds a copy of the dataset object).

    ## Fix safety
    There is no automatic fix: worker processes change how the program runs, and only its author can check
    what they need.
    - Where workers are started by *spawn* (Windows, and macOS from Python 3.8), each worker re-imports the
      main module: the training code must run under `if __name__ == "__main__":`, and the dataset, its
      transforms and the `collate_fn` must be picklable (no lambdas, no open file handles or database
      connections made in `__init__`; open them lazily in the worker).
    - Random augmentations: each worker gets its own `torch` seed, but NumPy's and `random`'s state are
      copied from the parent on fork, so every worker draws the same NumPy numbers unless a
      `worker_init_fn` seeds them (`np.random.seed(torch.initial_seed() % 2**32)`).
    - An `IterableDataset` is copied into every worker: without sharding by
      `torch.utils.data.get_worker_info()` each worker yields the whole dataset and samples repeat.
    - Each worker holds its own copy of the dataset: large in-memory datasets multiply host memory
      (copy-on-write pages get touched by Python's reference counts).

    ## PyTorch versions
    `num_workers` exists in every version; `persistent_workers` (see TL403) and `prefetch_factor` from
    PyTorch 1.7. Recent versions (2.13 included) warn when `num_workers` exceeds the CPUs the process may
    use, which is a sign to lower it. From Python 3.14 the default start method on Linux is *forkserver*,
    which, like spawn, needs the `__main__` guard and picklable datasets.
    """

    code = "TL401"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "dataloader-single-process"
    message = ("this DataLoader loads every batch in the training process (`num_workers` is 0), so the "
               "training loop waits for data; set `num_workers`, e.g. `min(8, os.cpu_count())`")
    summary = "Training DataLoader without worker processes"
    fix_availability = FixAvailability.NONE
    # Text gate: every finding's text holds `DataLoader` (the call is found by that name) and a training
    # step (`backward`, `.step(`).
    text_gate = (("DataLoader",), TRAINING_WORDS)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        return "DataLoader" in text and may_train(text)

    def detect(self, ctx: IndexContext) -> None:
        facts = loader_facts(ctx.index, ctx.project)
        for site in facts.sites:
            workers = facts.setting(site, "num_workers")
            if workers != ABSENT and workers != 0:
                continue
            if facts.is_in_memory_dataset(site) or facts.lists_its_samples(site) or facts.samples_on_gpu(site) \
                    or not facts.training_loops(site):
                continue
            message = self.message if workers == ABSENT else self.message.replace(
                "(`num_workers` is 0)", "(`num_workers=0`)")
            ctx.report(site.call, message=message + built_elsewhere(site))
