"""TL403: a DataLoader with workers that are started again for every epoch."""

from __future__ import annotations

import ast
from functools import partial
from typing import TYPE_CHECKING, Optional, Union

import libcst as cst

from torchlint.fix.arguments import with_keyword
from torchlint.fix.comments import DROPS_COMMENT, loses_comment
from torchlint.config import Settings
from torchlint.facts.loaders import ABSENT, built_elsewhere, loader_facts
from torchlint.rule import Applicability, Fix, FixAvailability, IndexContext, Rewrite, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, may_pass_positionally, may_train

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis


class DataloaderWorkersRestart(Rule):
    """## What it does
    Flags a `torch.utils.data.DataLoader(...)` with worker processes (`num_workers` a positive integer, or
    a name bound to one) and without `persistent_workers=True`, when a training loop of the same file
    iterates it once per pass of an outer loop (an epoch loop), while the loader itself is built once,
    outside that loop. The outer loop may be around the training loop or around a call of a function of
    the file that runs it (`for epoch in ...: train_one_epoch(model, train_loader)`). Batches drawn with
    `next()` count where the loader's iterator is made again and again: `iter(loader)` in the step loop
    (`except StopIteration: it = iter(loader)`), or a generator of the file that loops over the loader
    (`def cycle(dl): while True: yield from dl`). The loader may be built by a factory of the file, or of
    another file of the checked project (reported at the factory's call, naming where it is built, without
    a fix: a loader built by a call inside the epoch loop is rebuilt every epoch and not flagged), or handed
    to a class or function of this file by another project file (reported at the parameter that receives
    it, as in TL401, where its worker count is an integer in that file).

    The worker count may also come from the command line: `num_workers=args.workers` where `args` is what
    `parser.parse_args()` of an `argparse.ArgumentParser` of the file returns (also through a function of the
    file that parses and returns it, `opt = parse_option()`; also handed to the file's functions as a parameter, or through `torch.multiprocessing.spawn(main_worker, args=(..., args))`) and
    `--workers` has a positive integer default; the file must assign no attribute of that name
    (`args.workers = ...`) and use no `set_defaults` or subparsers on that parser. A project file's factory
    that passes its own parameter on (`def get_loader(..., num_workers=2): return DataLoader(...,
    num_workers=num_workers)`) is read at its call here: the integer, option or default the call gives it.
    Either way the count may be 0 in another run or at another call, where `persistent_workers=True` raises
    a `ValueError`: the message and the fix say `persistent_workers=args.workers > 0` (or
    `num_workers > 0` in the factory), which keeps them where there are workers and changes nothing where
    there are none.

    Silent where `num_workers` or `persistent_workers` come through `**kwargs` or a variable the rule cannot
    read (a config value, an option the file reassigns), for
    loaders rebuilt every epoch (persistent workers die with their loader), for loaders no training loop
    of the file iterates (also those built in another module in a way the project model does not follow:
    the rule stays silent rather than guess), and in tests.

    ## Why is this slow?
    Without `persistent_workers=True` a loader shuts its workers down at the end of every pass and starts
    new ones at the next `iter(loader)`: every epoch pays for starting `num_workers` processes (with the
    spawn start method, re-importing the main module, torch included, in each), copying the dataset object
    into each, and refilling the prefetch queue before the first batch arrives. With short epochs or
    many workers this pause is seconds per epoch, during which the GPU idles.

    ## Example
    ```python
    train_loader = DataLoader(train_set, batch_size=256, shuffle=True, num_workers=8, pin_memory=True)
    for epoch in range(epochs):
        for images, labels in train_loader:
            ...
    ```

    ## Use instead
    ```python
    train_loader = DataLoader(train_set, batch_size=256, shuffle=True, num_workers=8, pin_memory=True,
                              persistent_workers=True)
    for epoch in range(epochs):
        for images, labels in train_loader:
            ...
    ```

    ## Fix safety
    The fix adds `persistent_workers=True` (or turns `persistent_workers=False` into `True`). It is
    **unsafe**, because the workers keep their own copy of the dataset from the first epoch on:
    - State the main process changes on the dataset between epochs no longer reaches the workers: a
      curriculum (`train_set.difficulty = ...`), a resampled or re-shuffled index list kept in the dataset,
      `dataset.set_epoch(epoch)` on the dataset itself. (A `DistributedSampler`'s `set_epoch` is fine: the
      sampler lives in the main process.)
    - Random augmentations continue each worker's random streams instead of reseeding them every epoch,
      so the exact augmentations (and results) differ from the old run's; a `worker_init_fn` now runs
      once, not every epoch.
    - Worker processes and their memory stay alive between epochs, also while the evaluation loop runs.

    Where the count comes from an option, the fix passes `persistent_workers=<option> > 0` instead of
    `True`: the same in every run with workers, and `False` (the old behaviour) in a run without.

    ## PyTorch versions
    `persistent_workers=` exists from PyTorch 1.7; with `--torch-version` below 1.7 the fix would not run,
    so the rule reports without fixing there. It requires `num_workers > 0` (a `ValueError` otherwise),
    which is why the rule only fixes loaders whose worker count it can read, and passes a condition where
    the count may be 0 in another run.
    """

    code = "TL403"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "dataloader-workers-restart"
    message = ("this DataLoader starts its worker processes again for every epoch; pass "
               "`persistent_workers=True` to keep them")
    summary = "DataLoader workers restarted every epoch (no persistent_workers=True)"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (Applicability.UNSAFE,)
    text_gate = (("DataLoader",), TRAINING_WORDS)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        """A loader whose worker count is set: by keyword, or as the sixth positional argument."""
        return ("DataLoader" in text and ("num_workers" in text or may_pass_positionally(text, 5))
                and may_train(text))

    def detect(self, ctx: IndexContext) -> None:
        facts = loader_facts(ctx.index, ctx.project)
        for site in facts.sites:
            found = facts.worker_count(site)
            if found is None or found.count <= 0:
                continue
            if facts.setting(site, "persistent_workers") not in (ABSENT, False):
                continue
            if not any(facts.repeated_iteration(site, loop) for loop in facts.training_loops(site)):
                continue
            message, condition = self.message, None
            if found.option is not None or found.parameter is not None:
                # positive here, maybe 0 elsewhere (the command line, another call): `True` would raise there
                index = ctx.index
                if found.option is not None:
                    text = index.code_for_node(found.option, next(
                        a for a in index.ancestors(found.option) if isinstance(a, ast.stmt)))
                    why = f"`{text}` is {found.count} by default"
                elif site.imported is not None:
                    why = f"{found.count} workers at this call"
                else:
                    why = f"its factory's calls here give it {found.count} workers or more"
                condition = f"{found.parameter or text} > 0"
                message = (f"this DataLoader starts its worker processes again for every epoch ({why}); pass "
                           f"`persistent_workers={condition}` to keep them")
            if site.imported is not None:  # built in another file: the fix would be there
                ctx.report(site.call, message=message + built_elsewhere(site))
            elif ctx.torch_version < (1, 7):
                ctx.report(site.call, message=message + " (PyTorch 1.7 or later)")
            else:
                make = partial(_persist, condition)
                ctx.report(site.call, message=message, rewrite=Rewrite(make, message + " ({reason})", site.call, reads=site.call))


def _persist(condition: Optional[str], call: cst.Call, analysis: FileAnalysis) -> Union[Fix, str]:
    """``persistent_workers=True`` on the LibCST twin, or ``persistent_workers=<condition>`` (``args.workers >
    0``) where the worker count comes from the command line and may be 0 (where ``True`` would raise)."""
    value = cst.Name("True") if condition is None else cst.parse_expression(condition)
    fixed = with_keyword(call, "persistent_workers", value)
    if loses_comment({call: fixed}):
        return DROPS_COMMENT
    return Fix.replace(call, fixed, Applicability.UNSAFE)
