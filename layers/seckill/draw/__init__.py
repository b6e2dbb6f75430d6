"""The draw (docs/draw.md): tickets and the cursor's arithmetic, entries and the draw record,
the clock's moves, the persister's re-check of admission."""
