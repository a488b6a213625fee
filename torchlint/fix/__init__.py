"""Fixes: LibCST's view of a file, the rewrites findings propose, splicing them into the text, edits, comments, arguments."""
