"""The program model's shared facts, read off one file's index (``torchlint.ast_index``).

Each fact is written once, here, and every rule that needs it asks the same function: does this file train
(``script``), where does its work run and in what precision (``devices``), which loaders feed which loops
(``loaders``), where does code run without autograd or with a model in eval mode (``evaluation``). They replace, rule group by rule group, the LibCST forms of ``torchlint/device_facts.py`` and
``torchlint/loaders.py`` (docs/architecture.md, "One program model"; TL103 still reads the latter); the
script facts' LibCST forms are gone with their last user.
"""
