"""A run folder on disk, `OUT/<suite>/<label>-s<seed>/`: its files written atomically (`folder`), its
status.json and provenance.json as typed records (`records`), the name a label becomes (`names`), one owner at a time (`lock`), checksums of saved weights
(`checksums`), other libraries' output (`runlog`) and the words a failed run ends with (`failure`).
The training loop writes it and the suite reads it, so it sits below both."""
