"""What a run shows and writes besides fixes: suppression, noqa, output formats, reporters, rule docs."""
