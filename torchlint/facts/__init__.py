"""The program model's shared facts, read off one file's index (``torchlint.facts.index``).

Each fact is written once, here, and every rule that needs it asks the same function: does this file train
(``script``), where does its work run and in what precision (``devices``), which loaders feed which loops
(``loaders``), which names hold NumPy arrays (``arrays``), where code runs without autograd (``grad_mode``) or
with a model in eval mode (``evaluation``). Their LibCST forms are gone with their last user
(docs/architecture.md, "One program model").
"""
