"""What the engine's own source says about a failure: the checks of every covered SGLang release (a
bundled index built from the real source), the statement behind a traceback frame, the check behind a
pasted message, the flags a check reads, and the remedies its message names. See README.md here."""
